// The route option's body mappings are checked when the route table is read:
// a malformed declaration stops the server at start-up, naming the method.
import { create, createFileRegistry, setExtension, type DescService } from "@bufbuild/protobuf";
import {
  FieldDescriptorProto_Label,
  FieldDescriptorProto_Type,
  FileDescriptorProtoSchema,
  MethodOptionsSchema,
} from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import {
  RouteSchema,
  route as routeOption,
  type Route,
} from "../../gen/forelead/api/v1/route_pb.js";
import { routeTable } from "../../src/api/routes.js";

type RouteInit = Partial<Omit<Route, "$typeName" | "headerFields" | "responseHeaderFields">> & {
  headerFields?: Array<{ header: string; field: string }>;
  responseHeaderFields?: Array<{ header: string; field: string }>;
};

/** A one-method service, `Put` (client streaming unless told), declared with `route`. */
function service(
  route: RouteInit,
  kind: { clientStreaming?: boolean; serverStreaming?: boolean } = { clientStreaming: true },
): DescService {
  const options = create(MethodOptionsSchema);
  setExtension(
    options,
    routeOption,
    create(RouteSchema, { principal: "runner", method: "PUT", path: "/t", ...route }),
  );
  const field = (name: string, number: number, type: FieldDescriptorProto_Type) => ({
    name,
    number,
    type,
    jsonName: name.replace(/_(\w)/g, (_m, c: string) => c.toUpperCase()),
    label: FieldDescriptorProto_Label.OPTIONAL,
  });
  const file = create(FileDescriptorProtoSchema, {
    name: "t.proto",
    package: "t",
    syntax: "proto3",
    messageType: [
      {
        name: "Req",
        field: [
          field("data", 1, FieldDescriptorProto_Type.BYTES),
          field("lease_token", 2, FieldDescriptorProto_Type.STRING),
          field("offset", 3, FieldDescriptorProto_Type.INT64),
        ],
      },
      {
        name: "Res",
        field: [
          field("data", 1, FieldDescriptorProto_Type.BYTES),
          field("size", 2, FieldDescriptorProto_Type.INT64),
        ],
      },
    ],
    service: [
      {
        name: "S",
        method: [{ name: "Put", inputType: ".t.Req", outputType: ".t.Res", options, ...kind }],
      },
    ],
  });
  return createFileRegistry(file, () => undefined).getService("t.S")!;
}

describe("route option body mappings", () => {
  it("accept a raw body with header fields, and a raw response with response header fields", () => {
    expect(
      routeTable([
        service({
          rawRequestBody: "data",
          headerFields: [
            { header: "forelead-lease-token", field: "leaseToken" },
            { header: "forelead-upload-offset", field: "offset" },
          ],
        }),
      ]),
    ).toHaveLength(1);
    expect(
      routeTable([
        service(
          {
            method: "GET",
            rawResponseContentType: "application/octet-stream",
            responseHeaderFields: [{ header: "content-length", field: "size" }],
          },
          { serverStreaming: true },
        ),
      ]),
    ).toHaveLength(1);
  });

  it.each<[string, RouteInit, { clientStreaming?: boolean; serverStreaming?: boolean }, string]>([
    [
      "a client stream with neither mapping",
      {},
      { clientStreaming: true },
      "client-streaming methods need exactly one of ndjson_request and raw_request_body",
    ],
    [
      "a client stream with both mappings",
      { ndjsonRequest: true, rawRequestBody: "data" },
      { clientStreaming: true },
      "client-streaming methods need exactly one of ndjson_request and raw_request_body",
    ],
    [
      "a raw body on a unary method",
      { rawRequestBody: "data" },
      {},
      "client-streaming methods need exactly one of ndjson_request and raw_request_body",
    ],
    [
      "a raw body naming a non-bytes field",
      { rawRequestBody: "lease_token" },
      { clientStreaming: true },
      "raw_request_body lease_token is not a bytes field of Req",
    ],
    [
      "a raw body naming no field",
      { rawRequestBody: "nothing" },
      { clientStreaming: true },
      "raw_request_body nothing is not a bytes field",
    ],
    [
      "a content type without a raw body",
      { ndjsonRequest: true, rawRequestContentType: "application/x-git-bundle" },
      { clientStreaming: true },
      "raw_request_content_type applies only with raw_request_body",
    ],
    [
      "header fields on NDJSON",
      { ndjsonRequest: true, headerFields: [{ header: "x-a", field: "offset" }] },
      { clientStreaming: true },
      "header_fields do not apply to NDJSON requests",
    ],
    [
      "an upper-case header",
      { rawRequestBody: "data", headerFields: [{ header: "X-Offset", field: "offset" }] },
      { clientStreaming: true },
      'header "X-Offset" must be a lower-case header name',
    ],
    [
      "a header bound to an unknown field",
      { rawRequestBody: "data", headerFields: [{ header: "x-a", field: "lease_token" }] },
      { clientStreaming: true },
      'field "lease_token" is not a scalar field (JSON name) of Req',
    ],
    [
      "response headers on a JSON reply",
      { method: "POST", responseHeaderFields: [{ header: "x-size", field: "size" }] },
      {},
      "response_header_fields apply only to raw responses",
    ],
  ])("refuse %s, naming the method", (_what, route, kind, message) => {
    const read = () => routeTable([service(route, kind)]);
    expect(read).toThrow(/^t\.S\.Put: /);
    expect(read).toThrow(message);
  });
});
