// The address rule of webhook deliveries (docs/webhooks.md): every address a host resolves to is
// checked; loopback, private, link-local (the metadata address among them) and unspecified
// addresses, also as IPv4-mapped IPv6, are refused unless private ones are allowed; plain http
// goes only to private addresses, and only when they are allowed.
import { describe, expect, it } from "vitest";
import { resolveDestination } from "../../src/webhooks/destination.js";

const resolvingTo =
  (...addresses: string[]) =>
  async () =>
    addresses.map((address) => ({ address, family: address.includes(":") ? 6 : 4 }));

describe("where a webhook delivery may go", () => {
  it.each([
    ["127.0.0.2", "loopback"],
    ["::1", "loopback"],
    ["::ffff:127.0.0.1", "loopback"],
    ["10.9.8.7", "private"],
    ["172.31.0.1", "private"],
    ["192.168.1.1", "private"],
    ["100.64.0.1", "private"],
    ["fd00:ec2::254", "private"],
    ["169.254.169.254", "link-local"],
    ["fe80::1", "link-local"],
    ["0.0.0.0", "unspecified"],
    ["::", "unspecified"],
  ])("%s is refused as a %s address", async (address, kind) => {
    await expect(
      resolveDestination("https://hook.test/x", false, resolvingTo(address)),
    ).rejects.toThrow(`refused: hook.test resolves to ${address}, a ${kind} address`);
    const allowed = await resolveDestination("https://hook.test/x", true, resolvingTo(address));
    expect(allowed.address).toBe(address);
  });

  it("one private address among public ones refuses the host", async () => {
    await expect(
      resolveDestination("https://hook.test/x", false, resolvingTo("93.184.215.14", "10.0.0.1")),
    ).rejects.toThrow("a private address");
  });

  it("connects to the checked address of a public host, by its name", async () => {
    const to = await resolveDestination("https://hook.test/x", false, resolvingTo("93.184.215.14"));
    expect([to.address, to.family, to.url.hostname]).toEqual(["93.184.215.14", 4, "hook.test"]);
  });

  it("plain http goes only to an allowed private address", async () => {
    await expect(
      resolveDestination("http://hook.test/x", true, resolvingTo("93.184.215.14")),
    ).rejects.toThrow("refused: plain http to hook.test (93.184.215.14), a public address");
    const to = await resolveDestination("http://[::1]:8080/x", true);
    expect(to.address).toBe("::1");
  });
});
