// GET requests take their fields as query parameters, by JSON name.
import { describe, expect, it } from "vitest";
import type { DescMessage } from "@bufbuild/protobuf";
import {
  EnqueueJobRequestSchema,
  GetJobLogsRequestSchema,
} from "../../../gen/forelead/admin/v1/admin_pb.js";
import { queryJson } from "../../../src/api/rest/query-params.js";

const query = (text: string, schema: DescMessage = GetJobLogsRequestSchema) =>
  queryJson(`?${text}`, schema);

describe("query parameters", () => {
  it.each([
    ["true", true],
    ["1", true],
    ["false", false],
    ["0", false],
    ["yes", false],
    ["", false],
  ])("a bool is true only for true or 1: follow=%s is %s", (value, expected) => {
    expect(query(`follow=${value}`)).toEqual({ follow: expected });
  });

  it("a repeated field collects every value, in order; a singular one takes the last", () => {
    expect(
      query("labels=gpu&labels=arm64&workspaceId=a&workspaceId=b", EnqueueJobRequestSchema),
    ).toEqual({ labels: ["gpu", "arm64"], workspaceId: "b" });
  });

  it("reads fields by JSON name only and ignores parameters that name no field", () => {
    expect(query("jobId=j1&page_size=5&pageSize=7&nonsense=1")).toEqual({
      jobId: "j1",
      pageSize: "7",
    });
  });
});
