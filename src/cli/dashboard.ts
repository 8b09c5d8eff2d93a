import { Command } from "commander";
import { startDashboard } from "../dashboard/server/server.js";
import { parseListen } from "../dashboard/server/listen.js";
import { resolveEndpoint, withAdminClientOptions, type AdminClientFlags } from "./connection.js";

interface DashboardFlags extends AdminClientFlags {
  listen: string;
  allowRemote?: boolean;
}

/**
 * `forelead dashboard`: src/dashboard/server/server.ts with the connection of
 * src/cli/connection.ts.
 */
export function dashboardCommand(): Command {
  return withAdminClientOptions(
    new Command("dashboard")
      .option(
        "--listen <host:port>",
        "where to serve it (loopback unless --allow-remote)",
        "127.0.0.1:8080",
      )
      .option(
        "--allow-remote",
        "allow a non-loopback --listen address: whoever reaches it acts with your certificate",
      ),
  ).action(async (flags: DashboardFlags) => {
    const listen = parseListen(flags.listen);
    const endpoint = await resolveEndpoint(flags);
    const dashboard = await startDashboard({
      listen,
      allowRemote: flags.allowRemote ?? false,
      endpoint,
    });
    process.stdout.write(
      `forelead dashboard: ${dashboard.url}/ (API calls go to ` +
        `${endpoint.baseUrl} with your client certificate; Ctrl-C stops it)\n`,
    );
    const stop = () => void dashboard.close().then(() => process.exit(0));
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
  });
}
