import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RunnerService } from "../../gen/forelead/runner/v1/runner_pb.js";
import { startTestControlPlane, type TestControlPlane } from "../support/control-plane.js";
import { createRestClient, createTestClient, rpcProtocols } from "../support/clients.js";
import { databaseKind } from "../support/database.js";

describe(`clock and register on both surfaces (${databaseKind})`, () => {
  let cp: TestControlPlane;
  beforeAll(async () => {
    cp = await startTestControlPlane();
  });
  afterAll(async () => cp?.close());

  it("the REST clock answers apiVersion v1 and a server time", async () => {
    const cert = await cp.pki.runner("r1", "w1");
    const rest = createRestClient(cp.url, cp.pki.ca.certPem, cert);
    const reply = await rest.request("GET", "/v1/runner/clock");
    await rest.close();
    expect(reply.status).toBe(200);
    expect(reply.json.apiVersion).toBe("v1");
    expect(Math.abs(Date.parse(reply.json.serverTime) - Date.now())).toBeLessThan(5_000);
  });

  it.each(rpcProtocols)("a generated %s client registers and reads the clock", async (protocol) => {
    const cert = await cp.pki.runner("r1", "w1");
    const client = createTestClient(RunnerService, cp.url, cp.pki.ca.certPem, cert, protocol);
    const reg = await client.register({ apiVersion: "v1", runnerId: "r1", workspaceId: "w1", slots: 2, cpu: 4, memoryBytes: 1n << 30n, architecture: "amd64", labels: ["linux"] });
    expect(reg.apiVersion).toBe("v1");
    const clock = await client.clock({});
    expect(clock.apiVersion).toBe("v1");
    expect(clock.serverTime).toBeDefined();
  });
});
