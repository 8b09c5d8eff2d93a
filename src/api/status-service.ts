import type { ServiceImpl } from "@connectrpc/connect";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { StatusService } from "../../gen/forelead/admin/v1/status_pb.js";
import { worstStatus } from "../ops/doctor.js";
import type { OperatorView } from "../ops/operator-view.js";
import { groupMessage } from "./autoscale-service.js";
import { apiVersion } from "./request-rules.js";

/** The operator's status and doctor: read the view, encode it. */
export function createStatusService(view: OperatorView): ServiceImpl<typeof StatusService> {
  return {
    async getStatus() {
      const s = await view.status();
      const audit = s.database.audit;
      return {
        apiVersion,
        build: s.build,
        startedAt: timestampFromDate(s.startedAt),
        database: {
          kind: s.database.kind,
          reachable: s.database.reachable,
          roundTripMs: s.database.roundTripMs,
          migration: s.database.migration,
          listenConnected: s.database.listenConnected,
          auditBacklogRecords: BigInt(audit.inMemory + audit.spooled),
          auditSpoolBytes: BigInt(audit.spoolBytes),
          auditSpoolPath: audit.spoolPath,
          auditSpoolHolder: audit.spoolHolder,
          auditSpoolRecords: BigInt(audit.spooled),
          auditSpoolQuarantinedRecords: BigInt(audit.quarantined),
          auditSpoolQuarantinePath: audit.quarantinePath,
          auditOldestUnwritten: audit.oldestUnwritten
            ? timestampFromDate(audit.oldestUnwritten)
            : undefined,
        },
        replicas: s.replicas.map((r) => ({
          id: r.id,
          host: r.host,
          pid: r.pid,
          version: r.version,
          startedAt: timestampFromDate(r.startedAt),
          lastSeenAt: timestampFromDate(r.lastSeenAt),
        })),
        workspaces: s.workspaces.map((w) => ({
          workspaceId: w.workspaceId,
          queued: BigInt(w.queued),
          running: BigInt(w.running),
          waitingInput: BigInt(w.waitingInput),
          oldestQueuedSeconds: w.oldestQueuedSeconds,
          paused: w.paused,
        })),
        runners: {
          registered: BigInt(s.runners.registered),
          connected: BigInt(s.runners.connected),
          busy: BigInt(s.runners.busy),
          idle: BigInt(s.runners.idle),
          paused: BigInt(s.runners.paused),
          retired: BigInt(s.runners.retired),
          offline: BigInt(s.runners.offline),
          draining: BigInt(s.runners.draining),
        },
        pool: {
          slotsTotal: BigInt(s.pool.slotsTotal),
          slotsFree: BigInt(s.pool.slotsFree),
          cpuTotal: BigInt(s.pool.cpuTotal),
          cpuFree: BigInt(s.pool.cpuFree),
          memoryBytesTotal: BigInt(s.pool.memoryBytesTotal),
          memoryBytesFree: BigInt(s.pool.memoryBytesFree),
        },
        scalingGroups: s.scalingGroups.map(groupMessage),
        certificates: {
          serverNotAfter: timestampFromDate(s.serverNotAfter),
          issuerNotAfter: s.issuerNotAfter ? timestampFromDate(s.issuerNotAfter) : undefined,
          expiringWithin24h: BigInt(s.expiringWithin24h),
          expiring: s.expiring.map((c) => ({
            serial: c.serial,
            spiffeId: c.spiffeId,
            notAfter: timestampFromDate(c.notAfter),
          })),
        },
      };
    },
    async runDoctor() {
      const checks = await view.doctor();
      return { apiVersion, checks, status: worstStatus(checks) };
    },
  };
}
