import type http2 from "node:http2";
import { createContextValues, type ContextValues } from "@connectrpc/connect";
import { AdminService } from "../../gen/forelead/admin/v1/admin_pb.js";
import { EnrollService } from "../../gen/forelead/enroll/v1/enroll_pb.js";
import { FleetService } from "../../gen/forelead/admin/v1/fleet_pb.js";
import { createFleetService } from "../api/fleet-service.js";
import { RunnerService } from "../../gen/forelead/runner/v1/runner_pb.js";
import { StatsService } from "../../gen/forelead/admin/v1/stats_pb.js";
import { createStatsService } from "../api/stats-service.js";
import { AutoscaleService } from "../../gen/forelead/admin/v1/autoscale_pb.js";
import { createAutoscaleService } from "../api/autoscale-service.js";
import { SamplesService } from "../../gen/forelead/admin/v1/samples_pb.js";
import { StatusService } from "../../gen/forelead/admin/v1/status_pb.js";
import { createStatusService } from "../api/status-service.js";
import { createOperatorView } from "../ops/operator-view.js";
import { buildInfo } from "./build-info.js";
import { createAdminService } from "../api/admin-service.js";
import { createEnrollService } from "../api/enroll-service.js";
import { jobOwnership } from "../broker/jobs/workspace.js";
import { requestIdentityKey } from "../api/context.js";
import { services as serviceList } from "../api/services.js";
import { createApiHandler, serviceImpl } from "../api/surfaces.js";
import { createRunnerService } from "../api/runner-service.js";
import { createSamplesService } from "../api/samples-service.js";
import { SuspendService } from "../../gen/forelead/runner/v1/suspend_pb.js";
import { InputService } from "../../gen/forelead/admin/v1/input_pb.js";
import { createInputService, createSuspendService } from "../api/suspend-service.js";
import { PipelineService } from "../../gen/forelead/admin/v1/pipelines_pb.js";
import { createPipelineService } from "../api/pipeline-service.js";
import { BatchService } from "../../gen/forelead/admin/v1/batch_pb.js";
import { createBatchService } from "../api/batch-service.js";
import { ScheduleService } from "../../gen/forelead/admin/v1/schedules_pb.js";
import { createScheduleService } from "../api/schedule-service.js";
import { LoginService, SessionService } from "../../gen/forelead/admin/v1/session_pb.js";
import { createLoginService, createSessionService } from "../api/session-service.js";
import { WebhookService } from "../../gen/forelead/admin/v1/webhooks_pb.js";
import { createWebhookService } from "../api/webhook-service.js";
import { FlowService } from "../../gen/forelead/admin/v1/flow_pb.js";
import { createFlowService } from "../api/flow-service.js";
import type { Domain } from "./domain.js";
import { createRequestIdentifier } from "./identity.js";
import type { CheckedOptions } from "./options.js";
import { createProcedureCheck } from "./procedure-check.js";

/** What the listener calls for every request. */
export type RequestHandler = (
  req: http2.Http2ServerRequest,
  res: http2.Http2ServerResponse,
) => void;

/**
 * Binds every service of src/api/services.ts to the domain, guarded, on both
 * surfaces: Connect (and gRPC, gRPC-web) and the REST routes, one request
 * identity and one procedure check before either.
 */
export function bindServices(checked: CheckedOptions, domain: Domain): RequestHandler {
  const { options, tls, maxBodyBytes } = checked;
  const { store, clock, broker, inventory, code, artifacts, streams, identity, metrics } = domain;
  const { jobTokens } = domain;
  const { roles, audit, retirements, enrollment } = identity;
  const runnerRefusal = retirements.refusal;
  const guardOptions = {
    trustDomain: options.trustDomain,
    roles,
    audit,
    runnerRefusal,
    jobOwnership: (jobId: string) => jobOwnership(store.db, jobId),
    onRefusal: metrics.refused,
    findSession: identity.sessions?.find,
  };
  // One implementation per service of src/api/services.ts: the list the route docs are made from.
  const implementations = [
    serviceImpl(
      RunnerService,
      createRunnerService({
        clock,
        broker,
        inventory,
        enrollment,
        code,
        artifacts,
        streams,
        jobTokens,
      }),
    ),
    serviceImpl(
      AdminService,
      createAdminService({ broker, inventory, identity, code, artifacts, streams }),
    ),
    serviceImpl(EnrollService, createEnrollService(enrollment)),
    serviceImpl(StatsService, createStatsService(broker)),
    serviceImpl(SamplesService, createSamplesService(streams)),
    serviceImpl(StatusService, createStatusService(operatorView(checked, domain))),
    serviceImpl(
      FleetService,
      createFleetService({
        pauses: domain.pauses,
        events: domain.events,
        forgetRunner: (input) => domain.broker.forgetRunner(input),
        drainRunner: (input) => domain.broker.drainRunner(input),
      }),
    ),
    serviceImpl(SuspendService, createSuspendService({ broker, artifacts })),
    serviceImpl(InputService, createInputService({ broker })),
    serviceImpl(PipelineService, createPipelineService(broker)),
    serviceImpl(BatchService, createBatchService(broker)),
    serviceImpl(ScheduleService, createScheduleService(broker)),
    serviceImpl(SessionService, createSessionService(identity.sessions)),
    serviceImpl(LoginService, createLoginService(identity.sessions)),
    serviceImpl(WebhookService, createWebhookService(domain.webhooks)),
    serviceImpl(FlowService, createFlowService(broker)),
    serviceImpl(AutoscaleService, createAutoscaleService(broker)),
  ];
  // The anchors are read per new session: a reloaded trust bundle applies to the next connection.
  const identify = createRequestIdentifier(
    {
      trustDomain: options.trustDomain,
      maxLifetimeMs: options.maxCertLifetimeMs,
      get trustAnchors() {
        return tls.trustAnchors;
      },
    },
    (session) => tls.handshakeUnderCurrentMaterial(session),
  );
  // One set of context values per request: the procedure check, Connect and the REST router share
  // it.
  const valuesOf = new WeakMap<http2.Http2ServerRequest, ContextValues>();
  const contextValues = (req: http2.Http2ServerRequest) => {
    let values = valuesOf.get(req);
    if (!values)
      valuesOf.set(req, (values = createContextValues().set(requestIdentityKey, identify(req))));
    return values;
  };
  const checkProcedure = createProcedureCheck(serviceList, guardOptions);
  const connectHandler = createApiHandler({
    implementations,
    guard: guardOptions,
    contextValues,
    maxBodyBytes,
  });
  const handler = (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => {
    metrics.watchRequest(req, res, contextValues(req));
    checkProcedure(req, contextValues(req));
    connectHandler(req, res);
  };
  return handler;
}

/** The status and doctor of this control plane, over its current TLS material and its domain. */
function operatorView(checked: CheckedOptions, domain: Domain) {
  const { options, tls, issuer } = checked;
  return createOperatorView({
    store: domain.store,
    audit: domain.identity.audit,
    server: () => {
      const { cert, key } = tls.contextOptions();
      return { certificate: tls.certificate, certPem: String(cert), keyPem: String(key) };
    },
    issuer: options.issuer && issuer ? { ...options.issuer, notAfter: issuer.notAfter } : undefined,
    artifacts: domain.artifacts.store,
    replica: domain.replica,
    retention: domain.retention,
    runnerOfflineSeconds: checked.runnerOfflineSeconds,
    build: buildInfo(),
  });
}
