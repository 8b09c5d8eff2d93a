// Raw request bodies (raw_request_body): the fields in the first message, the bytes in chunks.
import { isMessage, type DescMessage, type Message, type MessageShape } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import {
  AgentPublishRequestSchema,
  PutUploadRequestSchema,
} from "../../../gen/forelead/runner/v1/runner_pb.js";
import { rawBodyMessages, type RawBody } from "../../../src/api/rest/raw-body.js";

async function* chunksOf(...parts: string[]): AsyncGenerator<Buffer> {
  for (const p of parts) yield Buffer.from(p);
}

const upload: RawBody = { schema: PutUploadRequestSchema, bytesField: "data", contentType: "" };
const publish: RawBody = {
  schema: AgentPublishRequestSchema,
  bytesField: "data",
  contentType: "application/x-git-bundle",
};

/** Every message of `it`, each checked to be a `schema` message. */
async function collect<T extends DescMessage>(
  it: AsyncIterable<Message>,
  schema: T,
): Promise<MessageShape<T>[]> {
  const out: MessageShape<T>[] = [];
  for await (const m of it) {
    if (!isMessage(m, schema)) throw new Error(`not a ${schema.typeName}`);
    out.push(m);
  }
  return out;
}

describe("raw request bodies", () => {
  it(
    "put the path and header fields and the first chunk in the first " +
      "message, and only the next chunk in each later one",
    async () => {
      const messages = await collect(
        rawBodyMessages(chunksOf("ab", "cd"), upload, undefined, {
          uploadId: "u1",
          offset: "5",
          leaseToken: "t",
        }),
        PutUploadRequestSchema,
      );
      expect(
        messages.map((m) => ({
          uploadId: m.uploadId,
          offset: m.offset,
          leaseToken: m.leaseToken,
          data: Buffer.from(m.data).toString(),
        })),
      ).toEqual([
        { uploadId: "u1", offset: 5n, leaseToken: "t", data: "ab" },
        { uploadId: "", offset: 0n, leaseToken: "", data: "cd" },
      ]);
    },
  );

  it("hand an empty body over as one message with no bytes, so the handler still sees the fields", async () => {
    const messages = await collect(
      rawBodyMessages(chunksOf(), upload, undefined, { uploadId: "u1" }),
      PutUploadRequestSchema,
    );
    expect(messages).toHaveLength(1);
    expect(messages[0]!.uploadId).toBe("u1");
    expect(messages[0]!.data).toEqual(new Uint8Array(0));
  });

  it("accept the route's content type with parameters and in any case", async () => {
    const messages = await collect(
      rawBodyMessages(chunksOf("x"), publish, "Application/X-Git-Bundle; charset=binary", {
        jobId: "j1",
      }),
      AgentPublishRequestSchema,
    );
    expect(messages.map((m) => m.jobId)).toEqual(["j1"]);
  });

  it.each([
    [
      "application/json",
      'send the request body as application/x-git-bundle, not "application/json"',
    ],
    [undefined, 'send the request body as application/x-git-bundle, not "(no content-type)"'],
  ])(
    "refuse a body sent as %s when the route names a content type, at the first read",
    async (given, message) => {
      const err = await collect(
        rawBodyMessages(chunksOf("x"), publish, given, {}),
        AgentPublishRequestSchema,
      ).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConnectError);
      expect((err as ConnectError).code).toBe(Code.InvalidArgument);
      expect((err as ConnectError).rawMessage).toBe(message);
    },
  );
});
