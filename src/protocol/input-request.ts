import { Ajv, type ErrorObject, type ValidateFunction } from "ajv";

/**
 * The rules of an input request (docs/suspend.md), applied by the control
 * plane when a job suspends and when it is answered, and by the runner agent
 * that reads a job's request. A request is `{id, prompt, schema,
 * expiresInSeconds}`; its schema is a JSON Schema object that ajv 8 compiles
 * (draft-07 by default, strict about unknown keywords), and an answer must
 * meet it.
 */

/** The features a runner declares to be let suspend jobs. */
export const suspendFeatures: readonly string[] = ["checkpoint-v1", "input-v1"];

/**
 * Where a job writes its request (under /output) and where its checkpoint goes; where the resumed
 * job finds both (under /input).
 */
export const inputPaths = {
  request: "input-request.json",
  checkpointDir: "checkpoint",
  answer: "answer.json",
} as const;

/** Bounds of a request. */
export const inputRequestLimits = {
  maxPromptChars: 4096,
  maxExpiresInSeconds: 7 * 24 * 3600,
  maxSchemaBytes: 64 * 1024,
  maxAnswerBytes: 256 * 1024,
  maxRequestFileBytes: 128 * 1024,
} as const;

const requestIdPattern = /^[A-Za-z0-9._-]{1,64}$/;

/** An input request as a job writes it. */
export interface InputRequestSpec {
  readonly id: string;
  readonly prompt: string;
  readonly schema: Record<string, unknown>;
  readonly expiresInSeconds: number;
}

/** A failed check: which field, and what is wrong. */
export class InputRuleError extends Error {}

function refuse(message: string): never {
  throw new InputRuleError(message);
}

// One compiler: ajv caches compiled schemas by their serialization, so the
// answer check recompiles nothing the suspend already compiled.
const ajv = new Ajv({
  allErrors: false,
  strict: true,
  strictTypes: false,
  strictTuples: false,
  strictRequired: false,
});

/**
 * Checks a request; throws InputRuleError naming the first bad field (as
 * `inputRequest.<field>`), a schema that does not compile included.
 */
export function checkInputRequest(request: InputRequestSpec): void {
  if (!requestIdPattern.test(request.id))
    refuse(
      `inputRequest.id ${JSON.stringify(request.id.slice(0, 80))} must be 1 to 64 characters of A-Z a-z 0-9 . _ -`,
    );
  if (!request.prompt)
    refuse("inputRequest.prompt is required: what the job asks for, for the person answering");
  if (request.prompt.length > inputRequestLimits.maxPromptChars)
    refuse(`inputRequest.prompt is longer than ${inputRequestLimits.maxPromptChars} characters`);
  if (
    !Number.isSafeInteger(request.expiresInSeconds) ||
    request.expiresInSeconds < 1 ||
    request.expiresInSeconds > inputRequestLimits.maxExpiresInSeconds
  ) {
    refuse(
      `inputRequest.expiresInSeconds must be 1 to ` +
        `${inputRequestLimits.maxExpiresInSeconds} (7 days); got ` +
        `${request.expiresInSeconds}`,
    );
  }
  compiledSchema(request.schema, "inputRequest.schema");
}

/** The compiled schema, or InputRuleError naming `field` and why it does not compile. */
function compiledSchema(schema: unknown, field: string): ValidateFunction {
  if (typeof schema !== "object" || schema === null || Array.isArray(schema))
    refuse(`${field} must be a JSON Schema object, e.g. {"type": "object", "properties": {...}}`);
  if (Buffer.byteLength(JSON.stringify(schema)) > inputRequestLimits.maxSchemaBytes)
    refuse(`${field} is over ${inputRequestLimits.maxSchemaBytes} bytes`);
  try {
    return ajv.compile(schema);
  } catch (err) {
    return refuse(`${field} is not a valid JSON Schema: ${(err as Error).message}`);
  }
}

/**
 * Checks an answer against the request's schema; throws InputRuleError
 * naming the failing JSON path (a JSON Pointer, "/" for the whole answer)
 * and the rule it broke.
 */
export function checkAnswer(schema: unknown, answer: unknown): void {
  if (answer === undefined) refuse("answer is required: a JSON value the request's schema accepts");
  if (Buffer.byteLength(JSON.stringify(answer)) > inputRequestLimits.maxAnswerBytes)
    refuse(`answer is over ${inputRequestLimits.maxAnswerBytes} bytes`);
  const validate = compiledSchema(schema, "the request's schema");
  if (validate(answer)) return;
  const first = validate.errors?.[0];
  refuse(first ? answerProblem(first) : "answer does not meet the request's schema");
}

function answerProblem(e: ErrorObject): string {
  const path = e.instancePath || "/";
  const extra =
    e.keyword === "enum"
      ? ` (${JSON.stringify((e.params as { allowedValues?: unknown }).allowedValues)})`
      : "";
  return `answer at ${path} ${e.message ?? "is invalid"}${extra} (rule "${e.keyword}" at schema ${e.schemaPath})`;
}
