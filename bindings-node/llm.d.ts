// Types of `hullguard/llm` (llm.js): reservation estimates, usage extractors, guarded streams.
import type { HullguardAbortSignal, Outcome } from './index.js'

/** A caller's tokenizer: a token count, or the tokens (their `length` counts). */
export type Tokenizer = (text: string) => number | ArrayLike<unknown>

/** Options of `estimateTokens()` (any other key is a `TypeError`). */
export interface TokenOptions {
  /** Characters per token when no tokenizer is given: a finite number > 0. Default 4. */
  charsPerToken?: number
  /** Counts the tokens instead (e.g. gpt-tokenizer's `countTokens` or `encode`). */
  tokenizer?: Tokenizer
}

/** Options of `estimate()` / `reservation()` (any other key is a `TypeError`). */
export interface EstimateOptions extends TokenOptions {
  /** The output reserved when the request sets no `max_tokens` / `max_completion_tokens` / `max_output_tokens`. Default 2048. */
  defaultMaxTokens?: number
  /** Tokens added per message (the chat format's framing). Default 3. */
  perMessageTokens?: number
  /** Tokens the text does not show (tools, images). Default 0. */
  extraInputTokens?: number
}

/** A request's reservation: `inputTokens + maxOutputTokens = total` (the `cost` to acquire). */
export interface Estimate {
  inputTokens: number
  maxOutputTokens: number
  total: number
}

/** Tokens a call used (`total` is the `usage` of `permit.release`). */
export interface Usage {
  inputTokens: number
  outputTokens: number
  total: number
}

export declare const DEFAULT_CHARS_PER_TOKEN: number
export declare const DEFAULT_MAX_TOKENS: number

/** Tokens of `text`: the tokenizer's count, else `ceil(text.length / charsPerToken)`. */
export declare function estimateTokens(text: string, options?: TokenOptions): number
/** The reservation of an OpenAI- or Anthropic-shaped request (an object). */
export declare function estimate(request: object, options?: EstimateOptions): Estimate
/** `estimate(request, options).total`. */
export declare function reservation(request: object, options?: EstimateOptions): number
/** The usage of an OpenAI (Chat Completions, Responses) or Anthropic response, or `null`. */
export declare function usageOf(response: unknown): Usage | null
/** `usageOf(result)?.total`: for `bh.run(fn, { cost, getUsage })`. */
export declare function getUsage(result: unknown): number | undefined

/** Options of `new StreamUsage()` (any other key is a `TypeError`). */
export interface StreamUsageOptions {
  /** The estimated input, used until the stream reports it exactly. Default 0. */
  inputEstimate?: number
  /** Characters per token of the output estimate from text deltas. Default 4. */
  charsPerToken?: number
}

/** Follows the usage of one streamed response (OpenAI chunks / Responses events / Anthropic events). */
export declare class StreamUsage {
  constructor(options?: StreamUsageOptions)
  inputTokens: number
  inputExact: boolean
  outputTokens: number
  outputExact: boolean
  readonly usage: Usage
  /** Tokens used so far; never decreases once the input is exact. */
  readonly used: number
  /** Takes one stream event; whether the usage changed. */
  update(event: unknown): boolean
}

/** `guardedStream` stopped a stream the bulkhead asked to cancel (an overrun with `cancelOnOverrun`). */
export declare class OverrunCancelled extends Error {
  readonly code: 'OVERRUN_CANCELLED'
  readonly usage: Usage
}

/** What `guardedStream` needs of a permit (a hullguard `Permit` has it). */
export interface UsagePermit {
  release(options?: { outcome?: Outcome; usage?: number }): boolean
  reportUsage?(used: number, remaining?: number): unknown
}

/** Options of `guardedStream()` (any other key is a `TypeError`). */
export interface GuardedStreamOptions {
  /** The request's output cap (the output part of the reservation). Required. */
  maxTokens: number
  /** The estimated input (until the stream reports it). Default 0. */
  inputEstimate?: number
  charsPerToken?: number
  /** A tracker to read the usage from afterwards. */
  tracker?: StreamUsage
  /** Stops the stream: rejects with `signal.reason`, settles 'ignored'. */
  signal?: HullguardAbortSignal
}

/**
 * Yields the events of `stream`, reports usage to `permit` as it arrives, and settles it once:
 * end → 'success', error → 'failure', early return or abort → 'ignored' (with the tokens used).
 */
export declare function guardedStream<E>(permit: UsagePermit, stream: AsyncIterable<E>, options: GuardedStreamOptions): AsyncGenerator<E, void, undefined>
