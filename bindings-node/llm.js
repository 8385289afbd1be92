'use strict'
/**
 * Small helpers for admitting LLM calls by tokens (`require('hullguard/llm')`; issue 16, item
 * 4). No dependencies.
 *
 * The bulkhead's budget holds *units* (here: tokens) while a call runs (docs/design.md §4.5): a
 * call reserves what it may use (`cost`), reports what it used while it streams
 * (`permit.reportUsage(used, remaining)`) and settles with what it really used
 * (`permit.release({ usage })`, the unused rest refunded). This module computes those numbers
 * from request and response shapes; it decides nothing (admission is the core's):
 *
 *     const { reservation, guardedStream, getUsage } = require('hullguard/llm')
 *     const permit = await bh.acquire({ cost: reservation(request) })
 *     for await (const event of guardedStream(permit, await client.messages.stream(request), { maxTokens: request.max_tokens })) { … }
 *     // or, not streaming: await bh.run(() => client.chat.completions.create(request), { cost: reservation(request), getUsage })
 *
 * - `estimate` / `reservation`: input tokens (characters ÷ `charsPerToken`, 4 by default, or a
 *   caller's `tokenizer`, e.g. gpt-tokenizer's `countTokens`) plus the output cap (`max_tokens` /
 *   `max_completion_tokens` / `max_output_tokens`, else `defaultMaxTokens`, 2048).
 * - `usageOf(response)`: `{inputTokens, outputTokens, total}` of an OpenAI (Chat Completions or
 *   Responses) or Anthropic response, `null` without usage; `getUsage(result)` its total (for
 *   `bh.run(fn, { getUsage })`).
 * - `StreamUsage`: follows the usage of a stream of such events.
 * - `guardedStream(permit, stream, opts)`: yields the stream's events, reports usage as it
 *   arrives, settles the permit once (end, error, early return, abort).
 */

const DEFAULT_CHARS_PER_TOKEN = 4
const DEFAULT_MAX_TOKENS = 2048
const MAX_KEYS = ['max_tokens', 'max_completion_tokens', 'max_output_tokens']

function get(obj, name) {
  if (obj === null || obj === undefined || (typeof obj !== 'object' && typeof obj !== 'function')) return undefined
  if (obj instanceof Map) return obj.get(name)
  return obj[name]
}

/** A response's token count: non-numbers read as 0, never negative. */
function int(v) {
  return typeof v === 'number' && Number.isFinite(v) ? Math.max(0, Math.trunc(v)) : 0
}

function checkRatio(r) {
  if (typeof r !== 'number') throw new TypeError(`charsPerToken must be a number, got ${typeof r}`)
  if (!(r > 0) || !Number.isFinite(r)) throw new RangeError(`charsPerToken must be a finite number > 0, got ${r}`)
  return r
}

function checkCount(name, v) {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) {
    throw new RangeError(`${name} must be an integer >= 0 (at most ${Number.MAX_SAFE_INTEGER}), got ${String(v)}`)
  }
  return v
}

function checkOptions(opts, known) {
  if (opts === undefined || opts === null) return {}
  if (typeof opts !== 'object') throw new TypeError(`options must be an object, got ${typeof opts}`)
  for (const name of Object.keys(opts)) {
    if (!known.includes(name)) {
      throw new TypeError(`unknown option "${name}" (known: ${known.map((n) => `"${n}"`).join(', ')})`)
    }
  }
  return opts
}

/** The text of a message content: a string or a list of blocks (`{type: 'text', text}`, …). */
function* texts(content) {
  if (content === null || content === undefined) return
  if (typeof content === 'string') {
    yield content
    return
  }
  if (Array.isArray(content)) {
    for (const block of content) {
      if (typeof block === 'string') {
        yield block
        continue
      }
      const text = get(block, 'text')
      if (typeof text === 'string') yield text
      const inner = get(block, 'content') // tool_result blocks nest content
      if (inner !== undefined && inner !== content) yield* texts(inner)
    }
  }
}

/**
 * Tokens of `text`: `tokenizer(text)` (a count, or tokens whose `length` counts) when given,
 * else `ceil(text.length / charsPerToken)`.
 */
function estimateTokens(text, opts) {
  const o = checkOptions(opts, ['charsPerToken', 'tokenizer'])
  if (typeof text !== 'string') throw new TypeError(`text must be a string, got ${typeof text}`)
  if (o.tokenizer !== undefined) {
    if (typeof o.tokenizer !== 'function') throw new TypeError(`tokenizer must be a function, got ${typeof o.tokenizer}`)
    const n = o.tokenizer(text)
    if (typeof n === 'number') return checkCount('tokenizer(text)', n)
    if (typeof n?.length === 'number') return n.length
    throw new TypeError(`tokenizer(text) must return a count or an array of tokens, got ${typeof n}`)
  }
  return Math.ceil(text.length / checkRatio(o.charsPerToken ?? DEFAULT_CHARS_PER_TOKEN))
}

const ESTIMATE_OPTIONS = ['charsPerToken', 'tokenizer', 'defaultMaxTokens', 'perMessageTokens', 'extraInputTokens']

/**
 * The reservation of an OpenAI- or Anthropic-shaped request: `{inputTokens, maxOutputTokens,
 * total}`. Input: the text of `system`, `instructions`, `prompt`, `input` (Responses API) and
 * every `messages[].content`, plus `perMessageTokens` (3) per message and `extraInputTokens`
 * (0; tools, images). Output: the first of `max_tokens`, `max_completion_tokens`,
 * `max_output_tokens` the request sets, else `defaultMaxTokens` (2048).
 */
function estimate(request, opts) {
  const o = checkOptions(opts, ESTIMATE_OPTIONS)
  const defaultMax = checkCount('defaultMaxTokens', o.defaultMaxTokens ?? DEFAULT_MAX_TOKENS)
  const perMessage = checkCount('perMessageTokens', o.perMessageTokens ?? 3)
  let n = checkCount('extraInputTokens', o.extraInputTokens ?? 0)
  const tok = { charsPerToken: o.charsPerToken, tokenizer: o.tokenizer }
  if (o.tokenizer === undefined) checkRatio(o.charsPerToken ?? DEFAULT_CHARS_PER_TOKEN)
  else if (typeof o.tokenizer !== 'function') throw new TypeError(`tokenizer must be a function, got ${typeof o.tokenizer}`)
  const count = (content) => {
    let c = 0
    for (const t of texts(content)) c += estimateTokens(t, tok)
    return c
  }
  for (const field of ['system', 'instructions', 'prompt']) n += count(get(request, field))
  const input = get(request, 'input')
  if (typeof input === 'string') n += count(input)
  else if (Array.isArray(input)) {
    for (const item of input) n += typeof item === 'string' ? count(item) : perMessage + count(get(item, 'content'))
  }
  for (const m of get(request, 'messages') ?? []) n += perMessage + count(get(m, 'content'))
  let out = defaultMax
  for (const key of MAX_KEYS) {
    const v = get(request, key)
    if (v !== undefined && v !== null) {
      out = checkCount(`request.${key}`, v)
      break
    }
  }
  return { inputTokens: n, maxOutputTokens: out, total: n + out }
}

/** `estimate(request, opts).total`: the `cost` to acquire for `request`. */
function reservation(request, opts) {
  return estimate(request, opts).total
}

function usage(inputTokens, outputTokens) {
  return { inputTokens, outputTokens, total: inputTokens + outputTokens }
}

function usageBlock(u) {
  if (u === null || u === undefined) return null
  const prompt = get(u, 'prompt_tokens')
  if (prompt !== undefined && prompt !== null) return usage(int(prompt), int(get(u, 'completion_tokens')))
  const inp = get(u, 'input_tokens')
  const out = get(u, 'output_tokens')
  if ((inp === undefined || inp === null) && (out === undefined || out === null)) return null
  const cached = int(get(u, 'cache_creation_input_tokens')) + int(get(u, 'cache_read_input_tokens'))
  return usage(int(inp) + cached, int(out))
}

/**
 * The usage of a response: OpenAI Chat Completions (`usage.prompt_tokens` /
 * `completion_tokens`), OpenAI Responses (`usage.input_tokens` / `output_tokens`, also a
 * `response.completed` event's `response.usage`) or Anthropic (`usage.input_tokens` +
 * `cache_creation_input_tokens` + `cache_read_input_tokens`, `usage.output_tokens`);
 * `{inputTokens, outputTokens, total}` or `null`.
 */
function usageOf(response) {
  return usageBlock(get(response, 'usage')) ?? usageBlock(get(get(response, 'response'), 'usage'))
}

/** `usageOf(result)?.total` (`undefined` without usage): `bh.run(fn, { getUsage })`. */
function getUsage(result) {
  return usageOf(result)?.total
}

/**
 * Follows the usage of one streamed response, event by event (`update(event)` → whether it
 * changed). Exact figures: Anthropic `message_start` / `message_delta`, OpenAI's final chunk
 * with `usage` (`stream_options: { include_usage: true }`) and Responses' `response.completed`.
 * Until exact output arrives it is estimated from the text deltas at `charsPerToken`.
 * `inputTokens` starts at `inputEstimate` and is exact once `inputExact`; from then on `used`
 * never decreases (the core refuses a lower cumulative report).
 */
class StreamUsage {
  #ratio
  #chars = 0
  #used = 0
  constructor(opts) {
    const o = checkOptions(opts, ['inputEstimate', 'charsPerToken'])
    this.inputTokens = checkCount('inputEstimate', o.inputEstimate ?? 0)
    this.inputExact = false
    this.outputTokens = 0
    this.outputExact = false
    this.#ratio = checkRatio(o.charsPerToken ?? DEFAULT_CHARS_PER_TOKEN)
  }

  get usage() {
    return usage(this.inputTokens, this.outputTokens)
  }

  get used() {
    const now = this.inputTokens + this.outputTokens
    return this.inputExact ? Math.max(this.#used, now) : now
  }

  update(event) {
    const before = [this.inputTokens, this.outputTokens, this.inputExact].join()
    const type = get(event, 'type')
    if (type === 'message_start') {
      const u = usageBlock(get(get(event, 'message'), 'usage'))
      if (u !== null) {
        this.inputTokens = u.inputTokens
        this.inputExact = true
        this.outputTokens = Math.max(this.outputTokens, u.outputTokens)
      }
    } else if (type === 'message_delta') {
      const u = get(event, 'usage')
      const out = get(u, 'output_tokens')
      if (out !== undefined && out !== null) {
        this.outputTokens = int(out)
        this.outputExact = true
      }
      if (get(u, 'input_tokens') !== undefined && get(u, 'input_tokens') !== null) {
        this.inputTokens = usageBlock(u).inputTokens
        this.inputExact = true
      }
    } else if (type === 'content_block_delta') {
      const d = get(event, 'delta')
      for (const f of ['text', 'thinking', 'partial_json']) {
        const t = get(d, f)
        if (typeof t === 'string') this.#text(t)
      }
    } else if (type === 'response.output_text.delta') {
      const t = get(event, 'delta')
      if (typeof t === 'string') this.#text(t)
    } else if (type === 'response.completed' || type === 'response.incomplete') {
      const u = usageOf(event)
      if (u !== null) this.#exact(u)
    } else {
      for (const c of get(event, 'choices') ?? []) {
        const t = get(get(c, 'delta'), 'content')
        if (typeof t === 'string') this.#text(t)
      }
      const u = usageBlock(get(event, 'usage'))
      if (u !== null) this.#exact(u)
    }
    if (this.inputExact) this.#used = Math.max(this.#used, this.inputTokens + this.outputTokens)
    return [this.inputTokens, this.outputTokens, this.inputExact].join() !== before
  }

  #exact(u) {
    this.inputTokens = u.inputTokens
    this.outputTokens = u.outputTokens
    this.inputExact = this.outputExact = true
  }

  #text(t) {
    this.#chars += t.length
    if (!this.outputExact) this.outputTokens = Math.max(this.outputTokens, Math.ceil(this.#chars / this.#ratio))
  }
}

/**
 * `guardedStream` stopped a stream because the bulkhead asked to cancel it (a usage report
 * overran the budget with `cancelOnOverrun`); `usage` is what it had used.
 */
class OverrunCancelled extends Error {
  constructor(u) {
    super(`stream cancelled: it overran the budget (used ${u.total} tokens)`)
    this.name = 'OverrunCancelled'
    this.code = 'OVERRUN_CANCELLED'
    this.usage = u
  }
}

const STREAM_OPTIONS = ['maxTokens', 'inputEstimate', 'charsPerToken', 'tracker', 'signal']

function abortReason(signal) {
  return signal.reason !== undefined ? signal.reason : new DOMException('This operation was aborted', 'AbortError')
}

/**
 * Yields the events of `stream` (any async iterable: an SDK stream, a `ReadableStream`, a Node
 * `Readable`) while `permit` holds its tokens.
 *
 * - As usage arrives (see `StreamUsage`) and once the input is exact, it calls
 *   `permit.reportUsage(used, remaining)` (`used` = input + output so far, `remaining` =
 *   `maxTokens` − output, ≥ 0): the hold follows the real input at once; output beyond
 *   `maxTokens` goes through admission or is flagged overrun. A report answering `cancel`
 *   (`cancelOnOverrun`) stops the stream with `OverrunCancelled`.
 * - It settles the permit once, `permit.release({ outcome, usage })` with the tokens used: the
 *   stream ended → 'success'; it threw → 'failure' (rethrown); the consumer stopped early
 *   (`break`, `return()`) or `signal` aborted → 'ignored' (the upstream is closed: its
 *   iterator's `return()`, and an SDK stream's `controller.abort()`; an abort rejects with the
 *   signal's reason).
 *
 * Options: `maxTokens` (required: the request's output cap), `inputEstimate`, `charsPerToken`,
 * `tracker` (a `StreamUsage` to read afterwards), `signal`.
 */
async function* guardedStream(permit, stream, opts) {
  const o = checkOptions(opts, STREAM_OPTIONS)
  const maxTokens = checkCount('maxTokens', o.maxTokens)
  if (typeof permit?.release !== 'function') throw new TypeError('permit must be a hullguard Permit')
  if (typeof stream?.[Symbol.asyncIterator] !== 'function') throw new TypeError('stream must be an async iterable')
  const signal = o.signal
  if (signal !== undefined && (typeof signal?.aborted !== 'boolean' || typeof signal.addEventListener !== 'function')) {
    throw new TypeError('signal must be an AbortSignal')
  }
  let tracker = o.tracker
  if (tracker === undefined) tracker = new StreamUsage({ inputEstimate: o.inputEstimate, charsPerToken: o.charsPerToken })
  else if (!(tracker instanceof StreamUsage)) throw new TypeError('tracker must be a StreamUsage')
  const report = typeof permit.reportUsage === 'function' ? permit.reportUsage.bind(permit) : undefined
  const it = stream[Symbol.asyncIterator]()
  let outcome = 'ignored'
  let reported = -1
  let aborted
  if (signal !== undefined) {
    aborted = new Promise((_, reject) => {
      if (signal.aborted) reject(abortReason(signal))
      else signal.addEventListener('abort', () => reject(abortReason(signal)), { once: true })
    })
    aborted.catch(() => {})
  }
  try {
    for (;;) {
      let r
      try {
        r = await (aborted === undefined ? it.next() : Promise.race([it.next(), aborted]))
      } catch (e) {
        if (!(signal?.aborted && e === signal.reason)) outcome = 'failure'
        throw e
      }
      if (r.done) {
        outcome = 'success'
        return
      }
      if (tracker.update(r.value) && tracker.inputExact && report !== undefined) {
        const used = tracker.used
        if (used !== reported) {
          reported = used
          const res = report(used, Math.max(0, maxTokens - tracker.outputTokens))
          if (res?.cancel) throw new OverrunCancelled(tracker.usage)
        }
      }
      yield r.value
    }
  } finally {
    try {
      if (outcome !== 'success' && typeof it.return === 'function') {
        // Not awaited when aborted: an upstream stuck in next() may never answer return().
        const closing = Promise.resolve()
          .then(() => it.return())
          .catch(() => {})
        if (!signal?.aborted) await closing
      }
      // The OpenAI and Anthropic SDK streams drop their connection through their controller.
      if (outcome !== 'success' && typeof stream.controller?.abort === 'function') stream.controller.abort()
    } finally {
      permit.release({ outcome, usage: tracker.used })
    }
  }
}

module.exports = {
  DEFAULT_CHARS_PER_TOKEN,
  DEFAULT_MAX_TOKENS,
  estimateTokens,
  estimate,
  reservation,
  usageOf,
  getUsage,
  StreamUsage,
  OverrunCancelled,
  guardedStream,
}
