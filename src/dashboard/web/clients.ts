// The dashboard's clients of the control plane: the generated Connect clients (gen/), over the
// dashboard's proxy (/api, src/dashboard/server/proxy.ts), which forwards each call with the
// operator's certificate. Pages call these; nothing in the web app fetches the API by hand.
import { createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { AdminService } from "../../../gen/forelead/admin/v1/admin_pb.js";
import { FleetService } from "../../../gen/forelead/admin/v1/fleet_pb.js";
import { SamplesService } from "../../../gen/forelead/admin/v1/samples_pb.js";
import { StatsService } from "../../../gen/forelead/admin/v1/stats_pb.js";
import { StatusService } from "../../../gen/forelead/admin/v1/status_pb.js";

/** Connect protocol, JSON (readable in the browser's network panel), through the proxy. */
const transport = createConnectTransport({ baseUrl: `${location.origin}/api` });

export const admin: Client<typeof AdminService> = createClient(AdminService, transport);
export const fleet: Client<typeof FleetService> = createClient(FleetService, transport);
export const status: Client<typeof StatusService> = createClient(StatusService, transport);
export const stats: Client<typeof StatsService> = createClient(StatsService, transport);
export const samples: Client<typeof SamplesService> = createClient(SamplesService, transport);
