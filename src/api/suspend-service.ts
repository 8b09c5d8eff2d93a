import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { toJson } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import type { SuspendService } from "../../gen/forelead/runner/v1/suspend_pb.js";
import type { InputService } from "../../gen/forelead/admin/v1/input_pb.js";
import type { Artifacts } from "../artifacts/artifacts.js";
import type { Digest } from "../artifacts/names.js";
import type { Broker } from "../broker/broker.js";
import { audited } from "./audit-actions.js";
import { principalOf, runnerOf } from "./context.js";
import { jobMessage } from "./job-view.js";
import { apiVersion } from "./request-rules.js";

/** What suspend and answer bind to. */
export interface SuspendServiceDeps {
  readonly broker: Pick<Broker, "suspend" | "answerInput" | "checkpointFile">;
  readonly artifacts: Artifacts;
}

/** The runner's suspend routes (docs/suspend.md): decode, call the broker, encode. */
export function createSuspendService(deps: SuspendServiceDeps): ServiceImpl<typeof SuspendService> {
  return {
    async suspend(req, ctx) {
      const holder = runnerOf(ctx);
      const checkpoint = await deps.artifacts.checkManifest(holder, req.jobId, req.checkpoint);
      const r = req.inputRequest;
      const job = await deps.broker.suspend({
        ...holder,
        jobId: req.jobId,
        leaseToken: req.leaseToken,
        request: {
          id: r?.id ?? "",
          prompt: r?.prompt ?? "",
          schema: r?.schema ?? {},
          expiresInSeconds: r?.expiresInSeconds ?? 0,
        },
        checkpoint,
      });
      return { apiVersion, job: jobMessage(job) };
    },

    async *checkpoint(req, ctx: HandlerContext) {
      const entry = await deps.broker.checkpointFile(
        runnerOf(ctx),
        req.jobId,
        req.leaseToken,
        req.name,
      );
      const content = await deps.artifacts.content({ ...entry, digest: entry.digest as Digest });
      for await (const data of content.chunks) {
        if (ctx.signal.aborted) return;
        yield { data };
      }
    },
  };
}

/** The admin's answer route (docs/suspend.md). */
export function createInputService(
  deps: Pick<SuspendServiceDeps, "broker">,
): ServiceImpl<typeof InputService> {
  return {
    async answerInput(req, ctx) {
      const answer = () =>
        deps.broker.answerInput({
          jobId: req.jobId,
          requestId: req.requestId,
          answer: req.answer ? toJson(ValueSchema, req.answer) : undefined,
          answeredBy: principalOf(ctx).spiffeId.text,
        });
      const job = await audited(ctx, "job.input", `job ${req.jobId.slice(0, 80)}`, answer, (j) => ({
        target: `job ${String(j.id)} in workspace "${String(j.workspaceId)}"`,
        reason: `input request ${JSON.stringify(req.requestId)} answered; job ${String(j.id)} is ${String(j.state)}`,
      }));
      return { apiVersion, job: jobMessage(job) };
    },
  };
}
