import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConnectError } from "@connectrpc/connect";
import { codeToString } from "@connectrpc/connect/protocol-connect";
import { RunnerService } from "../../gen/forelead/runner/v1/runner_pb.js";
import { startTestControlPlane, type TestControlPlane } from "../support/control-plane.js";
import { createRestClient, createTestClient, rpcProtocols } from "../support/clients.js";
import { databaseKind } from "../support/database.js";

describe(
  `clock and register: the REST route and every generated-client protocol ` +
    `answer alike (${databaseKind})`,
  () => {
    let cp: TestControlPlane;
    beforeAll(async () => {
      cp = await startTestControlPlane();
    });
    afterAll(async () => cp?.close());

    const registration = {
      apiVersion: "v1",
      runnerId: "r1",
      workspaceId: "w1",
      slots: 2,
      cpu: 4,
      memoryBytes: "1073741824",
      architecture: "amd64",
      labels: ["linux"],
      clockOffsetNs: "-1520000",
    };
    const refusals: Array<[string, Record<string, unknown>]> = [
      ["another runner", { runnerId: "r2" }],
      ["another workspace", { workspaceId: "w2" }],
      ["a wrong apiVersion", { apiVersion: "v2" }],
      ["slots 0", { slots: 0 }],
    ];

    it("the REST clock answers apiVersion v1 and a server time in RFC 3339 UTC", async () => {
      const rest = createRestClient(cp.url, cp.pki.ca.certPem, await cp.pki.runner("r1", "w1"));
      const reply = await rest.request("GET", "/v1/runner/clock");
      await rest.close();
      expect(reply.status).toBe(200);
      expect(Object.keys(reply.json).sort()).toEqual(["apiVersion", "serverTime"]);
      expect(reply.json.apiVersion).toBe("v1");
      expect(reply.json.serverTime).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/);
      expect(Math.abs(Date.parse(reply.json.serverTime) - Date.now())).toBeLessThan(5_000);
    });

    it.each(rpcProtocols)(
      "%s: the same clock and register answers as REST, and the same refusals",
      async (protocol) => {
        const cert = await cp.pki.runner("r1", "w1");
        const rest = createRestClient(cp.url, cp.pki.ca.certPem, cert);
        const client = createTestClient(RunnerService, cp.url, cp.pki.ca.certPem, cert, protocol);
        const restReg = await rest.request("POST", "/v1/runner/register", registration);
        const rpcReg = await client.register({
          ...registration,
          memoryBytes: 1073741824n,
          clockOffsetNs: -1520000n,
        });
        expect(restReg.json).toEqual({ apiVersion: "v1" });
        expect(rpcReg.apiVersion).toBe("v1");
        const clock = await client.clock({});
        expect(clock.apiVersion).toBe("v1");
        expect(Math.abs(Number(clock.serverTime!.seconds) * 1000 - Date.now())).toBeLessThan(5_000);

        for (const [what, change] of refusals) {
          const body = { ...registration, ...change };
          const restErr = await rest.request("POST", "/v1/runner/register", body);
          const rpcErr = await client
            .register({ ...body, memoryBytes: 1073741824n, clockOffsetNs: -1520000n } as never)
            .then(
              () => undefined,
              (e: unknown) => ConnectError.from(e),
            );
          expect(rpcErr, what).toBeDefined();
          expect(codeToString(rpcErr!.code), what).toBe(restErr.json.code);
          expect(rpcErr!.rawMessage, what).toBe(restErr.json.message);
        }
        await rest.close();
      },
    );
  },
);
