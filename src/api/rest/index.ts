// The REST surface: one file per step of a request (match, decode, call, encode, end).
export { createRestRouter } from "./router.js";
export { requestPath } from "./context.js";
