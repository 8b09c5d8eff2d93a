import type { Http2ServerResponse } from "node:http2";
import type { DescMessage, MessageInitShape } from "@bufbuild/protobuf";
import type { RouteEntry } from "../routes.js";
import { toConnectError } from "../errors.js";
import { drained, streamGone } from "./stream-end.js";
import { writeError } from "./error-json.js";
import { responseHeaderFields } from "./header-fields.js";

/**
 * Writes a server stream of chunks raw (`raw_response_content_type`): each
 * message's bytes field "data" in turn, the headers from the first message.
 * An error before the first message is the ordinary JSON error reply; after
 * it, a broken stream (never a truncated success).
 */
export async function writeRawStream(
  res: Http2ServerResponse,
  entry: RouteEntry,
  chunks: AsyncIterator<MessageInitShape<DescMessage>>,
  where: string,
): Promise<void> {
  const first = await chunks.next();
  res.writeHead(200, {
    ...responseHeaderFields(entry, first.done ? undefined : first.value),
    "content-type": entry.option.rawResponseContentType,
  });
  try {
    for (let r = first; !r.done; r = await chunks.next()) {
      const data = r.value["data"];
      if (data instanceof Uint8Array && data.length > 0 && !res.write(data)) await drained(res);
      if (streamGone(res)) {
        void chunks.return?.().catch(() => {}); // the client left: stop the handler
        return;
      }
    }
    res.end();
  } catch (err) {
    writeError(res, toConnectError(err, where));
  }
}
