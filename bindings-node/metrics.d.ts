// Types of `hullguard/metrics` (metrics.js): the core's metric table through prom-client and
// @opentelemetry/api (optional peer dependencies; structural types here, so that neither is
// needed to compile).
import type { Bulkhead, HostBulkhead, Registry } from './index.js'

/** One row of the core's metric table. */
export interface MetricRow {
  readonly name: string
  readonly kind: 'gauge' | 'counter' | 'histogram'
  /** `'seconds'` for the wait histogram, `''` for counts. */
  readonly unit: string
  /** Label names, `'key'` first. */
  readonly labels: readonly string[]
  readonly help: string
  /** The histogram's finite upper bounds, seconds. */
  readonly buckets?: readonly number[]
}

/** The sources: bulkheads by key label, registries (their keys label their series). */
export interface MetricSources {
  bulkheads?: Record<string, Bulkhead | HostBulkhead> | Map<string, Bulkhead | HostBulkhead> | null
  /** A registry, a list, or by name (the name labels a global cap's shared admission). */
  registries?: Registry | Registry[] | Record<string, Registry> | Map<string, Registry> | null
}

/** Options of `registerPrometheus` (any other key is a `TypeError`). */
export interface PrometheusOptions extends MetricSources {
  /** A prom-client `Registry`; default prom-client's global registry. */
  register?: any
  /** The prom-client module; default `require('prom-client')`. */
  client?: any
}

/** Options of `registerOpenTelemetry` (any other key is a `TypeError`). */
export interface OpenTelemetryOptions extends MetricSources {
  /** An `@opentelemetry/api` Meter; default `metrics.getMeter('hullguard')`. */
  meter?: any
}

/**
 * Registers the core table's families in a prom-client registry (`register`: the one given, or
 * prom-client's global one; serve `await register.metrics()`); `close()` removes them.
 */
export declare function registerPrometheus(options: PrometheusOptions): {
  metrics: unknown[]
  register: { metrics(): Promise<string>; readonly contentType: string }
  close(): void
}

/**
 * Publishes the core table through an OpenTelemetry Meter (observable gauges and counters, the
 * wait histogram on a synchronous Histogram fed at collection); `close()` removes the callback.
 */
export declare function registerOpenTelemetry(options: OpenTelemetryOptions): {
  instruments: Record<string, unknown>
  close(): void
}

/** The core's metric table (frozen rows). */
export declare function metricTable(): readonly MetricRow[]
