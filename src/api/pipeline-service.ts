import type { ServiceImpl } from "@connectrpc/connect";
import type { JsonValue } from "@bufbuild/protobuf";
import {
  PipelineSchema,
  type PipelineService,
  type PipelineStepRequest,
} from "../../gen/forelead/admin/v1/pipelines_pb.js";
import type { Broker } from "../broker/broker.js";
import type { PipelineView, StepSubmission } from "../broker/pipelines/pipelines.js";
import { decodeJson } from "../protocol/json/codec.js";
import { audited } from "./audit-actions.js";
import { callerRolesKey, jobReaderOf, principalOf } from "./context.js";
import { mayActOnJob } from "../identity/roles.js";
import { jobMessage } from "./job-view.js";
import { apiVersion } from "./request-rules.js";
import { scheduleFieldsOf } from "./schedule-fields.js";

/** The pipeline surface: decode, call the broker's pipelines, encode. */
export function createPipelineService(broker: Broker): ServiceImpl<typeof PipelineService> {
  const { pipelines } = broker;
  const target = (p: PipelineView) => ({
    target: `pipeline ${String(p.id)} in workspace "${String(p.workspaceId)}"`,
    reason: `pipeline ${String(p.id)} is ${String(p.state)}`,
  });
  return {
    async submitPipeline(req, ctx) {
      const submit = () =>
        pipelines.submit({
          workspaceId: req.workspaceId,
          name: req.name,
          idempotencyKey: req.idempotencyKey,
          steps: req.steps.map(stepOf),
          enqueuedBy: principalOf(ctx).spiffeId.text,
        });
      return {
        apiVersion,
        pipeline: pipelineMessage(
          await audited(
            ctx,
            "pipeline.submit",
            `workspace "${req.workspaceId.slice(0, 140)}"`,
            submit,
            target,
          ),
        ),
      };
    },
    async getPipeline(req) {
      return { apiVersion, pipeline: pipelineMessage(await pipelines.get(req.pipelineId)) };
    },
    async listPipelines(req, ctx) {
      const page = await pipelines.list({
        workspaceId: req.workspaceId,
        state: req.state,
        pageSize: req.pageSize,
        pageToken: req.pageToken,
        visibleTo: jobReaderOf(ctx),
      });
      return {
        apiVersion,
        pipelines: page.pipelines.map(pipelineMessage),
        nextPageToken: page.nextPageToken,
      };
    },
    async cancelPipeline(req, ctx) {
      const cancel = () => pipelines.cancel(req.pipelineId, principalOf(ctx).spiffeId.text);
      return {
        apiVersion,
        pipeline: pipelineMessage(
          await audited(
            ctx,
            "pipeline.cancel",
            `pipeline ${req.pipelineId.slice(0, 80)}`,
            cancel,
            target,
          ),
        ),
      };
    },
    async resumePipeline(req, ctx) {
      const resume = () => pipelines.resume(req.pipelineId, req.fromStep);
      return {
        apiVersion,
        pipeline: pipelineMessage(
          await audited(
            ctx,
            "pipeline.resume",
            `pipeline ${req.pipelineId.slice(0, 80)}`,
            resume,
            target,
          ),
        ),
      };
    },
    async retryJob(req, ctx) {
      const retry = () => broker.retry(req.jobId, principalOf(ctx).spiffeId.text);
      const job = await audited(ctx, "job.retry", `job ${req.jobId.slice(0, 80)}`, retry, (j) => ({
        target: `job ${String(j.id)} in workspace "${String(j.workspaceId)}"`,
        reason: `job ${String(j.id)} retries job ${String(j.retryOf)}`,
      }));
      return { apiVersion, job: jobMessage(job) };
    },
    async getJobActions(req, ctx) {
      const { enqueuedBy, refusal } = await broker.retryCheck(req.jobId);
      const id = principalOf(ctx).spiffeId.text;
      const retryRefusal = mayActOnJob(ctx.values.get(callerRolesKey), id, enqueuedBy)
        ? (refusal ?? "")
        : `${id} may retry only the jobs it enqueued (only an admin retries another's)`;
      return { apiVersion, retry: retryRefusal === "", retryRefusal };
    },
  };
}

/** A step as the broker takes it: the job fields decoded as an enqueue's are (admin-service.ts). */
export function stepOf(s: PipelineStepRequest): StepSubmission {
  const spec = s.spec;
  return {
    name: s.name,
    needs: s.needs,
    inputs: s.inputs.map((i) => ({
      step: i.step,
      name: i.name,
      glob: i.glob,
      optional: i.optional,
    })),
    allowFailure: s.allowFailure,
    labels: s.labels,
    repository: s.repository,
    targetBranch: s.targetBranch,
    spec: spec && {
      image: spec.image,
      argv: spec.argv,
      env: spec.env,
      timeoutSeconds: spec.timeoutSeconds,
      cpu: spec.cpu,
      memoryBytes: Number(spec.memoryBytes),
    },
    maxAttempts: s.maxAttempts,
    priority: s.priority,
    kind: s.kind,
    secrets: s.secrets,
    secretFiles: s.secretFiles,
    displayName: s.displayName,
    ...scheduleFieldsOf(s),
  };
}

function pipelineMessage(view: PipelineView) {
  return decodeJson(PipelineSchema, view as JsonValue);
}
