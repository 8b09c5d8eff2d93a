import type { DescService } from "@bufbuild/protobuf";
import { AdminService } from "../../gen/forelead/admin/v1/admin_pb.js";
import { EnrollService } from "../../gen/forelead/enroll/v1/enroll_pb.js";
import { FleetService } from "../../gen/forelead/admin/v1/fleet_pb.js";
import { RunnerService } from "../../gen/forelead/runner/v1/runner_pb.js";
import { StatsService } from "../../gen/forelead/admin/v1/stats_pb.js";
import { SamplesService } from "../../gen/forelead/admin/v1/samples_pb.js";
import { StatusService } from "../../gen/forelead/admin/v1/status_pb.js";
import { SuspendService } from "../../gen/forelead/runner/v1/suspend_pb.js";
import { InputService } from "../../gen/forelead/admin/v1/input_pb.js";
import { PipelineService } from "../../gen/forelead/admin/v1/pipelines_pb.js";
import { BatchService } from "../../gen/forelead/admin/v1/batch_pb.js";
import { ScheduleService } from "../../gen/forelead/admin/v1/schedules_pb.js";
import { LoginService, SessionService } from "../../gen/forelead/admin/v1/session_pb.js";
import { WebhookService } from "../../gen/forelead/admin/v1/webhooks_pb.js";
import { FlowService } from "../../gen/forelead/admin/v1/flow_pb.js";
import { AutoscaleService } from "../../gen/forelead/admin/v1/autoscale_pb.js";

/**
 * Every service the control plane serves, in the order docs/routes.md lists
 * them. The one list: the server binds these and the route table is
 * generated from them, so a service cannot be served without being documented.
 */
export const services: readonly DescService[] = [
  RunnerService,
  AdminService,
  EnrollService,
  FleetService,
  StatusService,
  StatsService,
  SamplesService,
  SuspendService,
  InputService,
  PipelineService,
  BatchService,
  ScheduleService,
  SessionService,
  LoginService,
  WebhookService,
  FlowService,
  AutoscaleService,
];
