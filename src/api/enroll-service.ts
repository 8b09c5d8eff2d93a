import type { ServiceImpl } from "@connectrpc/connect";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { EnrollService } from "../../gen/forelead/enroll/v1/enroll_pb.js";
import type { Enrollments } from "../identity/enrollment.js";
import { audited, recordAction } from "./audit-actions.js";
import { apiVersion } from "./request-rules.js";

/**
 * Enrollment: a grant, a runner id and a CSR in, a certificate out. Two audit
 * records on success (the grant used, the certificate issued), one refusal
 * otherwise; none of them holds the grant.
 */
export function createEnrollService(enrollment: Enrollments): ServiceImpl<typeof EnrollService> {
  return {
    async enroll(req, ctx) {
      const runner = JSON.stringify(req.runnerId.slice(0, 140));
      const enrolled = await audited(
        ctx,
        "grant.use",
        `enrollment of runner ${runner}`,
        () => enrollment.enroll(req),
        (e) => ({
          target: `enrollment grant ${e.grant.id} (workspace "${e.workspaceId}", created by ${e.grant.created_by})`,
          reason: `runner ${runner} enrolled in workspace "${e.workspaceId}"`,
          spiffeId: e.certificate.spiffeId,
        }),
      );
      const cert = enrolled.certificate;
      if (enrolled.replaced)
        recordAction(ctx, {
          action: "runner.replace",
          target: `runner ${runner} in workspace "${enrolled.workspaceId}"`,
          decision: "allow",
          reason:
            `enrolled again with replace grant ${enrolled.grant.id} (created by ` +
            `${enrolled.grant.created_by}) while in use: ${enrolled.replaced}`,
          spiffeId: cert.spiffeId,
        });
      recordAction(ctx, {
        action: "certificate.issue",
        target:
          `certificate ${cert.serialHex} (sha256 ${cert.sha256}) for ` +
          `${cert.spiffeId}, valid ${cert.notBefore.toISOString()} to ` +
          `${cert.notAfter.toISOString()}`,
        decision: "allow",
        reason: `issued on enrollment with grant ${enrolled.grant.id}`,
        spiffeId: cert.spiffeId,
      });
      return {
        apiVersion,
        certificateChain: cert.chainPem,
        spiffeId: cert.spiffeId,
        workspaceId: enrolled.workspaceId,
        notAfter: timestampFromDate(cert.notAfter),
      };
    },
  };
}
