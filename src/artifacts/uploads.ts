import { randomUUID } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import { sql, type Kysely, type Selectable } from "kysely";
import { requireLiveLease, type LiveLease } from "../broker/leases/check.js";
import { liveLease, liveLeaseRow } from "../broker/leases/sql-fragments.js";
import type { LeaseCall } from "../broker/leases/views.js";
import type { Database, UploadsTable } from "../store/schema.js";
import { checkArtifactName, checkDigest, checkMediaType, type Digest } from "./names.js";
import type { BlobStore, StagedWriter, StagingStore } from "./store.js";

/** What the upload operations work with. */
export interface UploadContext {
  readonly db: Kysely<Database>;
  readonly blobs: BlobStore;
  readonly staging: StagingStore;
  /** Largest artifact accepted at open. */
  readonly maxArtifactBytes: number;
  /** Bytes a put writes between two sync + durable-size commits. */
  readonly commitEveryBytes: number;
  /** Most uploads one lease may hold open at once. */
  readonly maxOpenPerLease: number;
  /** Runs `fn` while no other put or finalize of the upload runs in this process. */
  lock<T>(uploadId: string, fn: () => Promise<T>): Promise<T>;
}

/** An upload being opened: the artifact is declared before any byte moves. */
export interface OpenUploadInput extends LeaseCall {
  readonly name: string;
  readonly size: number;
  readonly digest: string;
  readonly mediaType: string;
}

/** Where an upload stands. */
export interface UploadProgress {
  readonly uploadId: string;
  /** Bytes held durably (synced and recorded): where the next put starts. */
  readonly durableSize: number;
  readonly size: number;
}

/** An artifact in the store, as a manifest names it. */
export interface StoredArtifact {
  readonly name: string;
  readonly digest: Digest;
  readonly size: number;
  readonly mediaType: string;
}

/** The header carrying the durable size on a refused put, so a client resumes exactly. */
const uploadOffsetHeader = "forelead-upload-offset";

type UploadRow = Selectable<UploadsTable>;

const uuidPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/**
 * Opens an upload under the caller's live lease. The same name, size, digest
 * and media type again while it is open returns the same upload (a lost
 * reply is safe to retry); the same name with another declaration is refused.
 */
export async function openUpload(
  ctx: UploadContext,
  input: OpenUploadInput,
): Promise<UploadProgress> {
  const name = checkArtifactName(input.name);
  if (!Number.isSafeInteger(input.size) || input.size < 0)
    throw new ConnectError(
      `size of ${JSON.stringify(name)} must be a byte count; got ${input.size}`,
      Code.InvalidArgument,
    );
  if (input.size > ctx.maxArtifactBytes) {
    throw new ConnectError(
      `artifact ${JSON.stringify(name)} declares ${input.size} bytes, over ` +
        `this control plane's cap of ${ctx.maxArtifactBytes} bytes (forelead ` +
        `serve --max-artifact-size)`,
      Code.ResourceExhausted,
    );
  }
  const digest = checkDigest(input.digest);
  const mediaType = checkMediaType(input.mediaType);
  const live = await requireLiveLease(ctx.db, input, input.jobId, input.leaseToken);
  const open = await ctx.db
    .selectFrom("uploads")
    .select((eb) => eb.fn.countAll<number>().as("n"))
    .where("lease_id", "=", live.leaseId)
    .where("state", "=", "open")
    .executeTakeFirstOrThrow();
  if (Number(open.n) >= ctx.maxOpenPerLease) {
    throw new ConnectError(
      `this lease already holds ${open.n} open uploads (at most ${ctx.maxOpenPerLease}); finalize some first`,
      Code.ResourceExhausted,
    );
  }
  const inserted = await ctx.db
    .insertInto("uploads")
    .values({
      id: randomUUID(),
      job_id: live.job.id,
      lease_id: live.leaseId,
      workspace_id: input.workspaceId,
      runner_id: input.runnerId,
      name,
      size: input.size,
      digest,
      media_type: mediaType,
      state: "open",
    })
    // The literal, not a parameter: Postgres matches the arbiter to the partial index
    // uploads_open_name only when it can read the predicate, which a generic plan of a prepared
    // statement cannot.
    .onConflict((oc) =>
      oc.columns(["lease_id", "name"]).where("state", "=", sql.lit("open")).doNothing(),
    )
    .returning(["id", "durable_size", "size"])
    .executeTakeFirst();
  if (inserted)
    return { uploadId: inserted.id, durableSize: inserted.durable_size, size: inserted.size };
  const existing = await ctx.db
    .selectFrom("uploads")
    .selectAll()
    .where("lease_id", "=", live.leaseId)
    .where("name", "=", name)
    .where("state", "=", "open")
    .executeTakeFirst();
  if (!existing)
    throw new ConnectError(
      `upload of ${JSON.stringify(name)} changed while it was opened; open it again`,
      Code.Aborted,
    );
  if (
    existing.size !== input.size ||
    existing.digest !== digest ||
    existing.media_type !== mediaType
  ) {
    throw new ConnectError(
      `an upload of ${JSON.stringify(name)} is already open under this lease ` +
        `(upload ${existing.id}, ${existing.size} bytes, ${existing.digest}); ` +
        `finalize it first or use another name`,
      Code.Aborted,
    );
  }
  return { uploadId: existing.id, durableSize: existing.durable_size, size: existing.size };
}

/** A put: the upload, the lease, and where the first byte of `data` goes. */
export interface PutUploadInput extends LeaseCall {
  readonly uploadId: string;
  readonly offset: number;
}

/**
 * Writes `data` at `offset` of an open upload. Bytes below the durable size
 * must equal those held (a replay: compared, never written again); the rest
 * is written in order, synced and recorded every `commitEveryBytes` and at
 * the end, also when the body breaks off, so a client resumes from exactly
 * what is held. A gap, different bytes, or bytes past the declared size are
 * refused; every refusal carries the durable size in `forelead-upload-offset`.
 */
export async function putUpload(
  ctx: UploadContext,
  input: PutUploadInput,
  data: AsyncIterable<Uint8Array>,
): Promise<UploadProgress> {
  const uploadId = checkUploadId(input.uploadId);
  const live = await requireLiveLease(ctx.db, input, input.jobId, input.leaseToken);
  await loadUpload(ctx.db, uploadId, live);
  return ctx.lock(uploadId, async () => {
    // again: a put before us may have moved it
    const upload = await loadUpload(ctx.db, uploadId, live);
    checkOpen(upload);
    const held = upload.durable_size;
    if (!Number.isSafeInteger(input.offset) || input.offset < 0)
      throw withOffset(
        new ConnectError(
          `offset must be a byte position; got ${input.offset}`,
          Code.InvalidArgument,
        ),
        held,
      );
    if (input.offset > held)
      throw withOffset(
        new ConnectError(
          `offset ${input.offset} leaves a gap: upload ${uploadId} holds ${held} bytes; resume from ${held}`,
          Code.Aborted,
        ),
        held,
      );
    const file = await ctx.staging.open(uploadId);
    let committed = held;
    let position = input.offset;
    let failure: unknown;
    try {
      const chunks = data[Symbol.asyncIterator]();
      for (;;) {
        const next = await chunks.next().catch((err) => Promise.reject(bodyBrokeOff(err)));
        if (next.done) break;
        const chunk = next.value;
        if (position + chunk.length > upload.size) {
          throw new ConnectError(
            `the body runs past the declared size of ${JSON.stringify(upload.name)}: ` +
              `${position + chunk.length} > ${upload.size} bytes`,
            Code.ResourceExhausted,
          );
        }
        const replay = Math.max(0, Math.min(chunk.length, held - position));
        if (replay > 0 && !(await file.matches(position, chunk.subarray(0, replay)))) {
          throw new ConnectError(
            `the bytes at ${position}..${position + replay} differ from those upload ` +
              `${uploadId} already holds; resume from ${held} with the same content`,
            Code.Aborted,
          );
        }
        if (replay < chunk.length) await file.write(position + replay, chunk.subarray(replay));
        position += chunk.length;
        if (position - committed >= ctx.commitEveryBytes)
          committed = await commit(ctx, file, upload, input, committed, position);
      }
    } catch (err) {
      failure = err;
    }
    try {
      if (position > committed)
        committed = await commit(ctx, file, upload, input, committed, position);
    } catch (err) {
      failure ??= err;
    } finally {
      await file.close();
    }
    if (failure !== undefined)
      throw failure instanceof ConnectError ? withOffset(failure, committed) : failure;
    return { uploadId, durableSize: committed, size: upload.size };
  });
}

/**
 * Sync, then record `position` as durable; refused when the lease died or another put moved the
 * upload.
 */
async function commit(
  ctx: UploadContext,
  file: StagedWriter,
  upload: UploadRow,
  input: PutUploadInput,
  from: number,
  position: number,
): Promise<number> {
  await file.sync();
  // The lease condition makes a put that outlives its lease stop counting bytes at once.
  const { rows } = await sql<{ durable_size: number }>`
    update uploads set durable_size = ${position}, updated_at = now()
    where id = ${upload.id} and state = 'open' and durable_size = ${from}
      and exists (select 1 from jobs
        where ${liveLease({ jobId: sql.ref("uploads.job_id"), leaseId: sql.ref("uploads.lease_id") }, "jobs")})
    returning durable_size`.execute(ctx.db);
  if (rows[0]) return position;
  const now = await ctx.db
    .selectFrom("uploads")
    .selectAll()
    .where("id", "=", upload.id)
    .executeTakeFirstOrThrow();
  checkOpen(now);
  if (now.durable_size !== from)
    throw new ConnectError(
      `another request changed upload ${upload.id} (it now holds ` +
        `${now.durable_size} bytes); resume from ${now.durable_size}`,
      Code.Aborted,
    );
  // throws why the lease is no longer live
  await requireLiveLease(ctx.db, input, input.jobId, input.leaseToken);
  throw new ConnectError(
    `the lease on job ${input.jobId} ended during the upload; ${from} bytes of upload ${upload.id} are kept`,
    Code.Aborted,
  );
}

/**
 * Verifies an upload and moves it into the store: the bytes held must be
 * exactly the declared size and hash to the declared digest; otherwise the
 * upload is discarded (its staged bytes removed) and the call refused.
 * Finalizing a finalized upload returns the same answer.
 */
export async function finalizeUpload(
  ctx: UploadContext,
  input: LeaseCall & { readonly uploadId: string },
): Promise<StoredArtifact> {
  const uploadId = checkUploadId(input.uploadId);
  const live = await requireLiveLease(ctx.db, input, input.jobId, input.leaseToken);
  await loadUpload(ctx.db, uploadId, live);
  return ctx.lock(uploadId, async () => {
    const upload = await loadUpload(ctx.db, uploadId, live);
    if (upload.state === "finalized") return storedArtifact(upload);
    checkOpen(upload);
    const label = `upload ${uploadId} (${JSON.stringify(upload.name)})`;
    const length = await ctx.staging.lengthOf(uploadId);
    const digest = upload.digest as Digest;
    // A crash after the rename into the store but before the row was updated: the blob is there.
    if (
      length === undefined &&
      upload.durable_size === upload.size &&
      upload.size > 0 &&
      (await ctx.blobs.has(digest))
    )
      return markFinalized(ctx, upload);
    if (upload.durable_size !== upload.size) {
      throw await discard(
        ctx,
        upload,
        `${label} holds ${upload.durable_size} of its declared ${upload.size} ` +
          `bytes; it was discarded: open a new upload and send all of it`,
        Code.FailedPrecondition,
      );
    }
    if (length === undefined && upload.size > 0)
      throw await discard(
        ctx,
        upload,
        `the bytes of ${label} are no longer held; it was discarded: open a new upload`,
        Code.FailedPrecondition,
      );
    // bytes a crash left past the durable size are not part of it
    const actual = await ctx.staging.seal(uploadId, upload.size);
    if (actual !== digest) {
      throw await discard(
        ctx,
        upload,
        `the ${upload.size} bytes of ${label} hash to ${actual}, not the declared ${digest}; it was discarded`,
        Code.InvalidArgument,
      );
    }
    await ctx.staging.promote(uploadId, digest);
    return markFinalized(ctx, upload);
  });
}

async function markFinalized(ctx: UploadContext, upload: UploadRow): Promise<StoredArtifact> {
  await ctx.db
    .updateTable("uploads")
    .set({ state: "finalized", finalized_at: sql`now()`, updated_at: sql`now()` })
    .where("id", "=", upload.id)
    .where("state", "=", "open")
    .execute();
  return storedArtifact(upload);
}

/** Marks an upload discarded, removes its bytes, and returns the refusal to throw. */
async function discard(
  ctx: UploadContext,
  upload: UploadRow,
  message: string,
  code: Code,
): Promise<ConnectError> {
  await ctx.db
    .updateTable("uploads")
    .set({ state: "discarded", discard_reason: message, updated_at: sql`now()` })
    .where("id", "=", upload.id)
    .where("state", "=", "open")
    .execute();
  await ctx.staging.remove(upload.id);
  return new ConnectError(message, code);
}

/**
 * Discards open uploads whose lease has ended (released, expired, settled):
 * nobody can write or finalize them any more, so their staged bytes go.
 * Bounded and SKIP LOCKED, so replicas sweep side by side.
 */
export async function sweepUploads(ctx: UploadContext, limit = 200): Promise<number> {
  const { rows } = await sql<{ id: string }>`
    with dead as (
      select u.id from uploads u join leases l on l.id = u.lease_id
      where u.state = 'open' and not (${liveLeaseRow("l")})
      limit ${limit}
      for update of u skip locked
    )
    update uploads set state = 'discarded', discard_reason =
      'the lease ended before the upload was finalized', updated_at = now()
    from dead where uploads.id = dead.id
    returning uploads.id`.execute(ctx.db);
  for (const row of rows) await ctx.staging.remove(row.id);
  return rows.length;
}

/** The upload on the caller's job, opened under its live lease; 404 or 409 otherwise. */
async function loadUpload(
  db: Kysely<Database>,
  uploadId: string,
  live: LiveLease,
): Promise<UploadRow> {
  const row = await db
    .selectFrom("uploads")
    .selectAll()
    .where("id", "=", uploadId)
    .where("job_id", "=", live.job.id)
    .executeTakeFirst();
  if (!row)
    throw new ConnectError(`upload ${uploadId} not found on job ${live.job.id}`, Code.NotFound);
  if (row.lease_id !== live.leaseId)
    throw new ConnectError(
      `upload ${uploadId} was opened under an earlier lease of job ${live.job.id}; open a new upload under this lease`,
      Code.Aborted,
    );
  return row;
}

function checkOpen(upload: UploadRow): void {
  if (upload.state === "finalized")
    throw new ConnectError(
      `upload ${upload.id} is already finalized as ${upload.digest}; nothing more can be written`,
      Code.Aborted,
    );
  if (upload.state === "discarded")
    throw new ConnectError(
      `upload ${upload.id} was discarded (${upload.discard_reason ?? "no reason recorded"}); open a new upload`,
      Code.Aborted,
    );
}

function checkUploadId(uploadId: string): string {
  if (!uuidPattern.test(uploadId))
    throw new ConnectError(
      `uploadId ${JSON.stringify(uploadId.slice(0, 80))} is not an upload id; use the one open answered`,
      Code.InvalidArgument,
    );
  return uploadId;
}

function storedArtifact(upload: UploadRow): StoredArtifact {
  return {
    name: upload.name,
    digest: upload.digest as Digest,
    size: upload.size,
    mediaType: upload.media_type,
  };
}

function withOffset(err: ConnectError, durableSize: number): ConnectError {
  err.metadata.set(uploadOffsetHeader, String(durableSize));
  return err;
}

/** A body that ended in a transport error: the bytes before it are kept. */
function bodyBrokeOff(err: unknown): ConnectError {
  if (err instanceof ConnectError) return err;
  return new ConnectError(
    `the request body broke off (${(err as Error).message}); the bytes received before it are kept`,
    Code.Canceled,
  );
}
