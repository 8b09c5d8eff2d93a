// The other end of bench/micro/hop-cost.ts: a loopback TCP server that echoes every byte it reads,
// and reports its own CPU time on request. Run by bench/lib/fork.ts.
import net from "node:net";
import type { AddressInfo } from "node:net";
import { serveRequests } from "../lib/fork.js";

serveRequests(async (m) => {
  if (m.type === "cpu") {
    const used = process.cpuUsage();
    return { type: "cpu", micros: used.user + used.system };
  }
  if (m.type !== "start") throw new Error(`unknown request ${m.type}`);
  const server = net.createServer((socket) => {
    socket.setNoDelay(true);
    socket.on("data", (bytes) => socket.write(bytes));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { type: "started", port: (server.address() as AddressInfo).port };
});
