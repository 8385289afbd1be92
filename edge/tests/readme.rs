//! The repository README's Rust blocks that use this crate are the crate README's, verbatim:
//! the crate README's run as this crate's doc tests (`src/lib.rs` includes it), while the
//! repository README is doc-tested by crates that do not depend on this one, so its copies are
//! marked `ignore` there.

use std::path::Path;

/// The fenced blocks of `markdown`: `(info string, code)`.
fn blocks(markdown: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in markdown.lines() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(info)) => open = Some((info.trim().to_owned(), String::new())),
            (Some(_), Some("")) => out.push(open.take().expect("open")),
            (Some((_, code)), _) => {
                code.push_str(line);
                code.push('\n');
            }
            (None, None) => {}
        }
    }
    out
}

#[test]
fn the_repository_readmes_edge_blocks_are_this_crates() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ours = std::fs::read_to_string(root.join("README.md")).unwrap();
    let repo = std::fs::read_to_string(root.join("../README.md")).unwrap();
    let ours: Vec<String> = blocks(&ours)
        .into_iter()
        .filter(|(info, _)| info == "rust")
        .map(|(_, code)| code)
        .collect();
    assert!(!ours.is_empty());
    for (info, code) in blocks(&repo) {
        if !info.starts_with("rust") || !code.contains("hullguard_tower") {
            continue;
        }
        assert_eq!(
            info, "rust,ignore",
            "a README block using hullguard_tower must be `rust,ignore` (doc-tested here)"
        );
        assert!(
            ours.contains(&code),
            "README block not in edge/README.md (copy it there, where it runs):\n{code}"
        );
    }
}
