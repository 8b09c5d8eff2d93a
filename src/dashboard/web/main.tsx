// The web app's entry (scripts/build.ts bundles it to dist/dashboard/app.js and app.css).
import { render } from "preact";
import { App } from "./app.js";
import "./app.css";

render(<App />, document.getElementById("app")!);
