import type { ServiceImpl } from "@connectrpc/connect";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { AdminService } from "../../gen/forelead/admin/v1/admin_pb.js";
import type { Identity } from "../identity/identity.js";
import { audited } from "./audit-actions.js";
import { principalOf } from "./context.js";
import { apiVersion } from "./request-rules.js";

/** What the identity methods of the admin service bind to. */
export interface IdentityAdminDeps {
  readonly identity: Identity;
}

type IdentityMethods = Pick<
  ServiceImpl<typeof AdminService>,
  "createEnrollmentGrant" | "retireRunner" | "listAuditRecords" | "listCertificates"
>;

/** Enrollment grants, retirement, the audit trail and issued certificates. */
export function createIdentityAdminMethods(deps: IdentityAdminDeps): IdentityMethods {
  const { identity } = deps;
  return {
    async createEnrollmentGrant(req, ctx) {
      const scope =
        `workspace "${req.workspaceId}"` +
        `${req.runnerId ? `, runner "${req.runnerId}"` : ", any runner id"}` +
        `${req.replace ? ", replacing an identity in use" : ""}`;
      const created = await audited(
        ctx,
        "grant.create",
        `enrollment grant for ${scope}`,
        () =>
          identity.createGrant({
            workspaceId: req.workspaceId,
            runnerId: req.runnerId,
            expiresInSeconds: req.expiresInSeconds,
            createdBy: principalOf(ctx).spiffeId.text,
            replace: req.replace,
          }),
        ({ record }) => ({
          target: `enrollment grant ${record.id} for ${scope}`,
          reason: `grant ${record.id} created; single use, expires at ${record.expires_at.toISOString()}`,
        }),
      );
      const { record } = created;
      return {
        apiVersion,
        grant: created.grant,
        grantId: record.id,
        workspaceId: record.workspace_id,
        runnerId: record.runner_id ?? "",
        expiresAt: timestampFromDate(record.expires_at),
        replace: record.replace,
      };
    },

    async retireRunner(req, ctx) {
      const result = await audited(
        ctx,
        "runner.retire",
        `runner "${req.runnerId}"${req.workspaceId ? ` in workspace "${req.workspaceId}"` : ""}`,
        () =>
          identity.retirements.retire({
            runnerId: req.runnerId,
            workspaceId: req.workspaceId,
            by: principalOf(ctx).spiffeId.text,
            reason: req.reason,
          }),
        (r) => ({
          target: `runner "${r.runnerId}" in workspace "${r.workspaceId}"`,
          reason: r.newlyRetired
            ? `retired${req.reason ? ` (${req.reason})` : ""}; ` +
              `${r.releasedJobIds.length} live lease(s) released to the ` +
              `queue${r.releasedJobIds.length ? `: jobs ${r.releasedJobIds.join(", ")}` : ""}`
            : `already retired at ${r.retiredAt.toISOString()}`,
        }),
      );
      return {
        apiVersion,
        runnerId: result.runnerId,
        workspaceId: result.workspaceId,
        retiredAt: timestampFromDate(result.retiredAt),
        releasedJobIds: [...result.releasedJobIds],
        newlyRetired: result.newlyRetired,
      };
    },

    async listAuditRecords(req) {
      const page = await identity.listAuditRecords({
        since: req.since ? dateOf(req.since) : undefined,
        until: req.until ? dateOf(req.until) : undefined,
        spiffeId: req.spiffeId,
        decision: req.decision,
        kind: req.kind,
        pageSize: req.pageSize,
        pageToken: req.pageToken,
      });
      return {
        apiVersion,
        nextPageToken: page.nextPageToken,
        records: page.records.map((r) => ({
          id: String(r.id),
          at: timestampFromDate(r.at),
          kind: r.kind,
          route: r.route,
          decision: r.decision,
          reason: r.reason,
          spiffeId: r.spiffe_id ?? "",
          certificateSerial: r.certificate_serial ?? "",
          certificateSha256: r.certificate_sha256 ?? "",
          certificateNotAfter: r.certificate_not_after
            ? timestampFromDate(r.certificate_not_after)
            : undefined,
          remoteAddress: r.remote_address ?? "",
          delegate: r.delegate ?? "",
          personClaim: r.person_claim ?? "",
          count: r.count,
          firstAt: timestampFromDate(r.at),
          lastAt: timestampFromDate(r.last_at ?? r.at),
          action: r.action ?? "",
          target: r.target ?? "",
        })),
      };
    },

    async listCertificates(req) {
      const certificates = await identity.listCertificates({
        workspaceId: req.workspaceId,
        runnerId: req.runnerId,
        all: req.all,
        expiringWithinSeconds: req.expiringWithinSeconds,
      });
      return {
        apiVersion,
        certificates: certificates.map((c) => ({
          serial: c.serial,
          spiffeId: c.spiffeId,
          workspaceId: c.workspaceId,
          runnerId: c.runnerId,
          notBefore: timestampFromDate(c.notBefore),
          notAfter: timestampFromDate(c.notAfter),
          issuedAt: timestampFromDate(c.issuedAt),
          issuedVia: c.issuedVia,
          sha256: c.sha256,
          status: c.status,
        })),
      };
    },
  };
}

function dateOf(ts: { seconds: bigint; nanos: number }): Date {
  return new Date(Number(ts.seconds) * 1000 + Math.floor(ts.nanos / 1e6));
}
