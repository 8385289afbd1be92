//! The response of a refused admission: its status, its small JSON body and its `Retry-After`.

use core::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use hullguard_core::{AcquireError, RejectionDetail};

use crate::body::AdmittedBody;

/// The HTTP status of a refusal: the core's one table ([`RejectionDetail::http_status`]: 429 for
/// `rate_limit`, 503 for every other reason).
fn status_of(detail: &RejectionDetail) -> StatusCode {
    StatusCode::from_u16(detail.http_status()).unwrap_or(StatusCode::SERVICE_UNAVAILABLE)
}

/// `Retry-After` in whole seconds, rounded up (at least 1 for any time above zero): the only
/// honest estimate is the core's `retry_after` (a rate's conformance time), so nothing else
/// gets the header.
pub(crate) fn retry_after_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() != 0)
}

/// The response of a refused admission: `{"reason": …, "bound": …}` (`application/json`), the
/// status of [`status_of`], `Retry-After` only when the detail carries a `retry_after`, and the
/// [`RejectionDetail`] in the response's extensions (for logging layers outside this one).
pub(crate) fn refused<B: http_body::Body>(error: AcquireError) -> Response<AdmittedBody<B>> {
    let Some(rejection) = error.rejection() else {
        // An argument the core refused (a classifier's class index outside the table): a bug
        // of the server's set-up, never the client's.
        let argument = error.invalid_argument().unwrap_or("request");
        let json = format!(r#"{{"reason":"invalid","argument":"{argument}"}}"#);
        let mut response = Response::new(AdmittedBody::refusal(Bytes::from(json)));
        *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        return response;
    };
    let detail = rejection.detail();
    // Both are snake_case identifiers from the core's tables: nothing to escape.
    let json = format!(
        r#"{{"reason":"{}","bound":"{}"}}"#,
        detail.reason.as_str(),
        detail.bound.as_str()
    );
    let mut response = Response::new(AdmittedBody::refusal(Bytes::from(json)));
    *response.status_mut() = status_of(&detail);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(after) = detail.retry_after {
        headers.insert(header::RETRY_AFTER, retry_after_secs(after).into());
    }
    response.extensions_mut().insert(detail);
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        let cases = [
            (Duration::from_nanos(1), 1),
            (Duration::from_millis(999), 1),
            (Duration::from_secs(1), 1),
            (Duration::from_millis(1001), 2),
            (Duration::from_secs(10), 10),
        ];
        for (d, want) in cases {
            assert_eq!(retry_after_secs(d), want, "{d:?}");
        }
    }
}
