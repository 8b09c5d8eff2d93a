// The REST surface: one file per step of a request (match, decode, call, encode, end).
export { createRestRouter } from "./router.js";
export type { RestRouterOptions } from "./router.js";
export type { RestBinding } from "./handler-factory.js";
export { requestPath } from "./context.js";
