// docs/routes.md is generated from the route options; it must match them, and
// every route of Runner protocol v1 must be in it.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { RunnerService } from "../../gen/forelead/runner/v1/runner_pb.js";
import { renderRoutesDoc } from "../../src/api/routes-doc.js";
import { routeTable } from "../../src/api/routes.js";
import { services } from "../../src/api/services.js";

const doc = renderRoutesDoc();

/** The v1 routes of the wire contract (Runner protocol v1); none may disappear. */
const v1Routes = [
  "GET /v1/runner/clock",
  ...[
    "register",
    "claim",
    "renew",
    "release",
    "code/head",
    "code/bundle",
    "inventory",
    "events",
    "logs",
  ].map((r) => `POST /v1/runner/${r}`),
];

describe("docs/routes.md", () => {
  it("is what renderRoutesDoc() renders from the served services", () => {
    const onDisk = readFileSync(new URL("../../docs/routes.md", import.meta.url), "utf8");
    expect(onDisk, "docs/routes.md is stale: run npm run generate").toBe(doc);
  });

  it("says it is generated and how to regenerate it", () => {
    expect(doc.split("\n")[0]).toMatch(
      /^<!-- Generated .*Do not edit; run `npm run generate`\. -->$/,
    );
  });

  it.each(v1Routes)("lists the v1 route %s, as the route options declare it", (route) => {
    const entry = routeTable(services).find((e) => `${e.httpMethod} ${e.path}` === route);
    expect(entry, `${route} is not declared by any served service`).toBeDefined();
    expect(entry!.service).toBe(RunnerService);
    expect(entry!.principal).toBe("runner");
    const row = doc.split("\n").find((line) => line.startsWith(`| \`${route}\` |`));
    expect(row, `${route} has no row`).toBeDefined();
    expect(row).toContain(
      `| \`/forelead.runner.v1.RunnerService/${entry!.method.name}\` | runner |`,
    );
  });

  it("has exactly one row per method of every served service", () => {
    const rows = doc.split("\n").filter((line) => /^\| `(GET|POST|PUT|DELETE) /.test(line));
    const methods = services.flatMap((s) => s.methods);
    expect(rows).toHaveLength(methods.length);
    for (const m of methods)
      expect(
        rows.filter((r) => r.includes(`| \`/${m.parent.typeName}/${m.name}\` |`)),
      ).toHaveLength(1);
  });

  it("describes bodies by the route's body mapping", () => {
    const row = (route: string) =>
      doc.split("\n").find((line) => line.startsWith(`| \`${route}\` |`)) ?? "";
    expect(row("GET /v1/runner/clock")).toContain("| none | JSON `ClockResponse` |");
    expect(row("POST /v1/runner/claim")).toContain(
      "| JSON `ClaimRequest` | JSON of `lease` (`Lease`); 204 when there is none |",
    );
    expect(row("POST /v1/runner/release")).toContain("| 204 No Content |");
    expect(row("POST /v1/runner/events")).toContain("| NDJSON stream of `EventsRequest` |");
    expect(row("POST /v1/runner/code/bundle")).toContain("| raw `application/x-git-bundle` |");
    expect(row("POST /v1/runner/agent/publish")).toContain(
      "| raw `application/x-git-bundle` (`data` of `AgentPublishRequest`); " +
        "headers `forelead-api-version` (`apiVersion`), `forelead-job-id` " +
        "(`jobId`), `forelead-lease-token` (`leaseToken`) |",
    );
  });

  it("carries each method's leading proto comment as its summary", () => {
    expect(doc).toContain("| The control plane's UTC clock, for the runner's clock offset. |");
  });
});
