// Types of `hullguard/edge` (edge.js): admission of a server's incoming requests, classed from
// the request, with load shedding by overload signals (docs/design.md §4.11). Structural request
// and response types: no dependency on @types/node, Express or Fastify.
import type { AdmitResult, Bulkhead, LoadReading } from './index.js'

/** What the admission reads of a request (`http.IncomingMessage`, Express's `req`, Fastify's `request`). */
export interface EdgeRequest {
  /** Lower-case header names (Node's). */
  headers: Record<string, string | string[] | undefined>
  url?: string
  /** Express's path before its mounts stripped it. */
  originalUrl?: string
}

/** What the admission uses of a response (`http.ServerResponse`). */
export interface EdgeResponse {
  statusCode: number
  readonly writableFinished: boolean
  readonly destroyed: boolean
  readonly headersSent: boolean
  once(event: 'finish' | 'close', listener: () => void): unknown
  off(event: 'finish' | 'close', listener: () => void): unknown
  writeHead(status: number, headers: Record<string, string>): { end(body?: string): unknown }
  end(body?: string): unknown
  destroy(): unknown
}

/** A class name of the bulkhead's `classes`, or an index. */
export type EdgeClass = string | number

/**
 * How a request is classed: a header whose value is a class name (an unknown value takes
 * `defaultClass`), a map of route prefix → class (the longest prefix of the path whose
 * segments match), or a function (`undefined` / `null` → `defaultClass`; a class the bulkhead
 * lacks is an error of the request).
 */
export type Classify<R = EdgeRequest> =
  | string
  | Record<string, EdgeClass>
  | Map<string, EdgeClass>
  | ((req: R) => EdgeClass | null | undefined)

/** Anything a probe reports to (a `Bulkhead`). */
export interface LoadTarget {
  reportLoad(reading: LoadReading): void
}

/** Options of `EventLoopLagProbe` (any other key is a `TypeError`). */
export interface EventLoopLagProbeOptions {
  /** Bulkheads to report to (more with `add()`). */
  targets?: LoadTarget | LoadTarget[] | null
  /** The reporting period, ms (> 0). Default 500. */
  intervalMs?: number | null
  /** `monitorEventLoopDelay`'s sampling resolution, ms (> 0); subtracted from the delays. Default 10. */
  resolutionMs?: number | null
  /** The statistic of an interval: a percentile in (0, 100], `'mean'` or `'max'`. Default 99. */
  percentile?: number | 'mean' | 'max' | null
  /** Injects the source (a `perf_hooks` `IntervalHistogram`'s shape, ns). */
  histogram?: {
    percentile(p: number): number
    readonly mean?: number
    readonly max?: number
    readonly count?: number
    reset(): void
    enable?(): unknown
    disable?(): unknown
  } | null
  /** `false`: no timer (call `sample()` yourself). Default true. */
  start?: boolean
}

/** Options of `CpuProbe` (any other key is a `TypeError`). */
export interface CpuProbeOptions {
  targets?: LoadTarget | LoadTarget[] | null
  /** The reporting period, ms (> 0). Default 500. */
  intervalMs?: number | null
  /** Injects `process.cpuUsage()` (cumulative µs). */
  cpuUsage?: (() => { user: number; system: number }) | null
  /** Injects the wall clock, ms (default `performance.now()`). */
  now?: (() => number) | null
  /** `false`: no timer (call `sample()` yourself). Default true. */
  start?: boolean
}

/** The shared part of the probes: targets, an unref'd interval timer, `close()`. */
declare abstract class Probe<Reading> {
  /** Starts the timer (unref'd); idempotent. */
  start(): this
  /** Adds a target; idempotent. */
  add(target: LoadTarget | LoadTarget[]): this
  remove(target: LoadTarget): this
  /** One reading now, reported to every target; `undefined` when there was nothing to report. */
  sample(): Reading | undefined
  readonly intervalMs: number
  readonly running: boolean
  /** Stops the timer; idempotent. */
  close(): void
}

/**
 * Event-loop lag by `perf_hooks.monitorEventLoopDelay`: every `intervalMs` the interval's
 * percentile less the resolution (≥ 0), reported as `{eventLoopLagMs}`.
 */
export declare class EventLoopLagProbe extends Probe<{ eventLoopLagMs: number }> {
  constructor(options?: EventLoopLagProbeOptions)
}

/** Process CPU: `process.cpuUsage()` deltas over wall time, reported as `{cpu}` in cores. */
export declare class CpuProbe extends Probe<{ cpu: number }> {
  constructor(options?: CpuProbeOptions)
}

/** Options of `admission()` (any other key is a `TypeError`). */
export interface AdmissionOptions<R = EdgeRequest> {
  /** The bulkhead every request is admitted by. */
  bulkhead: Bulkhead
  /** How a request is classed; default: every request `defaultClass`. */
  classify?: Classify<R> | null
  /** The class of a request `classify` does not class. Default the bulkhead's class 0. */
  defaultClass?: EdgeClass | null
  /** A header (e.g. `'grpc-timeout'`) whose grpc-timeout value is the request's budget. Default off. */
  deadlineHeader?: string | false | null
  /** The queue wait of each request, ms. Default the bulkhead's `queueTimeoutMs`. */
  queueTimeoutMs?: number | null
  /** `true`, probe options, or a probe of yours (its targets gain the bulkhead). */
  lagProbe?: boolean | Omit<EventLoopLagProbeOptions, 'targets'> | EventLoopLagProbe | null
  cpuProbe?: boolean | Omit<CpuProbeOptions, 'targets'> | CpuProbe | null
  /** The `node:http` handler's error handling. Default: 500 (or the connection closed) and a process warning. */
  onError?: ((err: unknown, req: any, res: any) => void) | null
}

/** A Fastify plugin function (`fastify.register(edge.fastify)`). */
export type FastifyEdgePlugin = ((instance: any, opts: unknown, done: (err?: Error) => void) => void) & {
  readonly [key: symbol]: unknown
}

/** Edge admission of one bulkhead. */
export declare class EdgeAdmission<R = EdgeRequest> {
  constructor(options: AdmissionOptions<R>)
  readonly bulkhead: Bulkhead
  /** The probes in use (started here or given). */
  readonly probes: Array<EventLoopLagProbe | CpuProbe>
  /**
   * Admits one request (for other frameworks): `admitted(deadline)` once the permit is held
   * (released at the response's finish or close), `refused(result)` with the refusal,
   * `failed(err)` when classifying or the options fail.
   */
  enter(
    subject: R,
    res: EdgeResponse,
    admitted: (deadline: number | undefined) => void,
    refused: (result: Extract<AdmitResult, { ok: false }>) => void,
    failed: (err: unknown) => void,
  ): void
  /** A `node:http` request listener: `handler` behind the admission. */
  handler<Req extends EdgeRequest, Res extends EdgeResponse>(fn: (req: Req, res: Res) => unknown): (req: Req, res: Res) => void
  /** An Express middleware. */
  express(): (req: any, res: any, next: (err?: unknown) => void) => void
  /** A Fastify plugin (not encapsulated: it guards the instance it is registered on). */
  readonly fastify: FastifyEdgePlugin
  /** Stops the probes started here, detaches the bulkhead from given ones. */
  close(): void
}

/** A `node:http` listener made by `admission(handler, options)`. */
export type AdmissionListener<Req, Res> = ((req: Req, res: Res) => void) & {
  readonly admission: EdgeAdmission
  close(): void
}

/** `admission(options)`: an `EdgeAdmission`. */
export declare function admission<R = EdgeRequest>(options: AdmissionOptions<R>): EdgeAdmission<R>
/** `admission(handler, options)`: the `node:http` listener of `handler`, with `close()`. */
export declare function admission<Req extends EdgeRequest, Res extends EdgeResponse>(
  handler: (req: Req, res: Res) => unknown,
  options: AdmissionOptions,
): AdmissionListener<Req, Res>

/** The response of a refusal: status, headers (`Retry-After` only with an estimate), JSON body. */
export declare function rejectionResponse(
  result: { reason: string; detail: unknown; error?: unknown },
  classNames?: ReadonlyArray<string | null>,
): { status: number; headers: Record<string, string>; body: string }

/** A grpc-timeout value as ms (`'1500m'` → 1500), `undefined` when malformed. */
export declare function parseGrpcTimeout(value: string | undefined): number | undefined
