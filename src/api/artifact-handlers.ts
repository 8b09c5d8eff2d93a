import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import type { AdminService } from "../../gen/forelead/admin/v1/admin_pb.js";
import type { PutUploadRequest, RunnerService } from "../../gen/forelead/runner/v1/runner_pb.js";
import type { Artifacts } from "../artifacts/artifacts.js";
import type { StoredArtifact } from "../artifacts/uploads.js";
import { runnerOf } from "./context.js";
import { apiVersion, checkApiVersion } from "./request-rules.js";

type RunnerImpl = ServiceImpl<typeof RunnerService>;
type AdminImpl = ServiceImpl<typeof AdminService>;

/** The runner's upload methods: open, put (a stream of chunks), finalize. */
export function runnerArtifactHandlers(
  artifacts: Artifacts,
): Pick<RunnerImpl, "openUpload" | "putUpload" | "finalizeUpload"> {
  return {
    async openUpload(req, ctx) {
      const opened = await artifacts.open({
        ...runnerOf(ctx),
        jobId: req.jobId,
        leaseToken: req.leaseToken,
        name: req.name,
        size: Number(req.size),
        digest: req.digest,
        mediaType: req.mediaType,
      });
      return { apiVersion, uploadId: opened.uploadId, durableSize: BigInt(opened.durableSize) };
    },

    async putUpload(reqs, ctx) {
      const messages = reqs[Symbol.asyncIterator]();
      const first = await messages.next();
      if (first.done)
        throw new ConnectError(
          "a put needs a first message naming the upload, the lease and the offset",
          Code.InvalidArgument,
        );
      const head: PutUploadRequest = first.value;
      checkApiVersion(head.apiVersion);
      const put = {
        ...runnerOf(ctx),
        jobId: head.jobId,
        leaseToken: head.leaseToken,
        uploadId: head.uploadId,
        offset: Number(head.offset),
      };
      const progress = await artifacts.put(put, chunksOf(head, messages));
      return {
        apiVersion,
        uploadId: progress.uploadId,
        durableSize: BigInt(progress.durableSize),
        size: BigInt(progress.size),
      };
    },

    async finalizeUpload(req, ctx) {
      const stored = await artifacts.finalize({
        ...runnerOf(ctx),
        jobId: req.jobId,
        leaseToken: req.leaseToken,
        uploadId: req.uploadId,
      });
      return { apiVersion, ...artifactMessage(stored) };
    },
  };
}

/** The admin's artifact methods: a job's manifest, and one artifact's bytes. */
export function adminArtifactHandlers(
  artifacts: Artifacts,
): Pick<AdminImpl, "listJobArtifacts" | "downloadArtifact"> {
  return {
    async listJobArtifacts(req) {
      return { apiVersion, artifacts: (await artifacts.list(req.jobId)).map(artifactMessage) };
    },

    async *downloadArtifact(req, ctx: HandlerContext) {
      const artifact = await artifacts.read(req.jobId, req.name);
      let head: ReturnType<typeof artifactMessage> | undefined = artifactMessage(artifact);
      for await (const chunk of artifact.chunks) {
        if (ctx.signal.aborted) return;
        yield { data: chunk, ...head };
        head = undefined;
      }
      // an empty artifact still says what it is
      if (head) yield { data: new Uint8Array(0), ...head };
    },
  };
}

/** Proto fields of an artifact. */
function artifactMessage(a: StoredArtifact): {
  name: string;
  digest: string;
  size: bigint;
  mediaType: string;
} {
  return { name: a.name, digest: a.digest, size: BigInt(a.size), mediaType: a.mediaType };
}

/** The data of the first message, then of each later one. */
async function* chunksOf(
  head: PutUploadRequest,
  rest: AsyncIterator<PutUploadRequest>,
): AsyncGenerator<Uint8Array> {
  if (head.data.length > 0) yield head.data;
  for (let r = await rest.next(); !r.done; r = await rest.next())
    if (r.value.data.length > 0) yield r.value.data;
}
