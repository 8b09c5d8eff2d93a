// The dashboard's clients of the control plane: the generated Connect clients (gen/), over the
// dashboard's proxy (/api, src/dashboard/server/proxy.ts), which forwards each call with the
// operator's certificate. Pages call these; nothing in the web app fetches the API by hand.
import {
  Code,
  ConnectError,
  createClient,
  type Client,
  type Interceptor,
} from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { AdminService } from "../../../gen/forelead/admin/v1/admin_pb.js";
import { FleetService } from "../../../gen/forelead/admin/v1/fleet_pb.js";
import { PipelineService } from "../../../gen/forelead/admin/v1/pipelines_pb.js";
import { SamplesService } from "../../../gen/forelead/admin/v1/samples_pb.js";
import { StatsService } from "../../../gen/forelead/admin/v1/stats_pb.js";
import { StatusService } from "../../../gen/forelead/admin/v1/status_pb.js";
import { csrfHeader, currentCsrfToken, signedOut, signedOutHeader } from "./session.js";

/**
 * Every call carries the session's CSRF token; a call refused for want of a session (401:
 * signed out, ended, the dashboard restarted) takes the page back to the sign-in page.
 */
const session: Interceptor = (next) => async (req) => {
  req.header.set(csrfHeader, currentCsrfToken());
  try {
    return await next(req);
  } catch (err) {
    // Only the dashboard's own 401 means the session is gone; the control plane's
    // unauthenticated (the operator's certificate expired) is shown in the page like any refusal.
    const e = ConnectError.from(err);
    if (e.code === Code.Unauthenticated && e.metadata.get(signedOutHeader) === "1") signedOut();
    throw err;
  }
};

/** Connect protocol, JSON (readable in the browser's network panel), through the proxy. */
const transport = createConnectTransport({
  baseUrl: `${location.origin}/api`,
  interceptors: [session],
});

export const admin: Client<typeof AdminService> = createClient(AdminService, transport);
export const fleet: Client<typeof FleetService> = createClient(FleetService, transport);
export const status: Client<typeof StatusService> = createClient(StatusService, transport);
export const stats: Client<typeof StatsService> = createClient(StatsService, transport);
export const samples: Client<typeof SamplesService> = createClient(SamplesService, transport);
export const pipelines: Client<typeof PipelineService> = createClient(PipelineService, transport);
