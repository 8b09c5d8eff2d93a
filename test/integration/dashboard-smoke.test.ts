import { describe, expect, it } from "vitest";
import { useDashboard } from "../support/browser.js";

describe("dashboard in a real browser", () => {
  const dash = useDashboard();

  it("opens the overview: the control plane's status through the proxy, no script errors", async () => {
    const p = await dash.newPage();
    await p.open("#/overview");
    await p.page.waitForSelector("[data-stat=runners-registered] .stat-value");
    const registered = await p.page.$eval(
      "[data-stat=runners-registered] .stat-value",
      (e) => e.textContent,
    );
    expect(registered).toBe("0");
    expect(await p.page.$eval("main h1", (e) => e.textContent)).toBe("Overview");
    expect(p.errors).toEqual([]);
  });
});
