// Types of `hullguard/dedup` (dedup.js): in-flight deduplication (single-flight) over a bulkhead.
import type { Bulkhead, HullguardAbortSignal, ObserveMode } from './index.js'

/** Options of `new SingleFlight()` (any other key is a `TypeError`). */
export interface SingleFlightOptions {
  /**
   * The cost part of a flight's partition: calls share a flight only when it is equal.
   * Default `costBucket` (powers of two: 0 | 1 | 2–3 | 4–7 | …); `(c) => c` shares exact costs.
   */
  costBucket?: (cost: number) => string | number
}

/** Options of `sf.run()` (any other key is a `TypeError`). */
export interface SingleFlightRunOptions<T = unknown> {
  /** Permits of the shared admission (part of the partition). Default 1. */
  weight?: number
  /** Budget units of the shared admission, an integer ≥ 0 (its bucket is part of the partition). */
  cost?: number
  /** The admission class, by name or index (part of the partition). */
  admissionClass?: string | number
  /** The per-call observe mode (part of the partition; `undefined` = `'off'`). */
  observe?: ObserveMode
  /** Aborts this caller only, with its own `signal.reason`; the others keep waiting. */
  signal?: HullguardAbortSignal
  /** A streaming result (`ReadableStream`, Node `Readable`, async iterable, `Response`): a copy for this caller. */
  tee?: boolean
  /**
   * The budget units the work used, from its result (e.g. `getUsage` of `hullguard/llm`): the
   * permit is released with that usage, the rest of `cost` refunded. `undefined` / `null`: unknown.
   */
  getUsage?: (result: T) => number | null | undefined
}

/**
 * Runs concurrent calls of the same caller-supplied key once, under one admission of the
 * bulkhead, and shares the outcome. A refused leader's followers try admission themselves; the
 * work's `signal` aborts only when every waiter has left.
 */
export declare class SingleFlight {
  constructor(bulkhead: Bulkhead, options?: SingleFlightOptions)
  /** The flights in the table. */
  readonly size: number
  /** How many calls joined a flight another call had started. */
  readonly hits: number
  /**
   * `fn(signal)` once per partition in flight. Rejects with this caller's own `BulkheadError`,
   * fn's error, `UnshareableResultError`, its own `signal.reason`, or a TypeError / RangeError
   * naming a bad argument.
   */
  run<T>(key: string | number, fn: (signal: HullguardAbortSignal) => T | PromiseLike<T>, options?: SingleFlightRunOptions<Awaited<T>>): Promise<Awaited<T>>
}

/** A follower's result is a single-consumer stream and it did not pass `tee: true`. */
export declare class UnshareableResultError extends TypeError {
  readonly code: 'UNSHAREABLE_RESULT'
  /** The caller's key. */
  readonly key: string | number
}

/** The default cost bucket: the bit length of `cost` (0 | 1 | 2–3 | 4–7 | …). */
export declare function costBucket(cost: number): number
