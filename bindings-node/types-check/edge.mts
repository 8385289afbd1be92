// Edge admission and metrics, typed (issue 18): typechecked by `tsc --noEmit -p types-check`,
// never run. Lines marked @ts-expect-error must stay errors: they pin the names and shapes.
import { Bulkhead, Registry, type LoadStats, type RejectionDetail } from 'hullguard'
import { admission, CpuProbe, EventLoopLagProbe, parseGrpcTimeout, rejectionResponse, type EdgeRequest } from 'hullguard/edge'
import { metricTable, registerOpenTelemetry, registerPrometheus } from 'hullguard/metrics'

const bh = new Bulkhead({
  maxConcurrent: 64,
  classes: [{ name: 'batch', priority: 0 }, { name: 'critical', priority: 1 }],
  shedCpuThreshold: 0.85,
  shedLagThresholdMs: 50,
  criticalPriority: 1,
})
bh.reportLoad({ cpu: 0.9 })
bh.reportLoad({ eventLoopLagMs: 12, cpu: null })
// @ts-expect-error the lag is eventLoopLagMs
bh.reportLoad({ lag: 1 })
const load: LoadStats | null = bh.stats().load
const names: Array<string | null> = bh.classNames
const status = (d: RejectionDetail): number => d.httpStatus

const edge = admission({
  bulkhead: bh,
  classify: 'x-priority',
  deadlineHeader: 'grpc-timeout',
  lagProbe: { intervalMs: 250, percentile: 'mean' },
  cpuProbe: true,
})
admission({ bulkhead: bh, classify: { '/api/critical': 'critical', '/': 0 } })
admission({ bulkhead: bh, classify: (req: EdgeRequest) => (req.headers['x-vip'] ? 'critical' : undefined) })
// @ts-expect-error classify answers a class name or index
admission({ bulkhead: bh, classify: () => true })
// @ts-expect-error a bulkhead is required
admission({ classify: 'x' })
const probe = new EventLoopLagProbe({ targets: bh, start: false })
const r: { eventLoopLagMs: number } | undefined = probe.sample()
new CpuProbe({ intervalMs: 1000 }).add(bh).close()
const express = edge.express()
const plugin = edge.fastify
edge.close()
const ms: number | undefined = parseGrpcTimeout('1500m')
const res = rejectionResponse({ reason: 'shed', detail: null }, names)
const s: number = res.status

const prom = registerPrometheus({ bulkheads: { db: bh }, registries: [new Registry()] })
prom.close()
registerOpenTelemetry({ bulkheads: new Map([['db', bh]]) }).close()
const unit: string = metricTable()[0].unit
void [load, status, r, express, plugin, ms, s, unit]
