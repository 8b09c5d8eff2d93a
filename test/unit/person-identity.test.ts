import { describe, expect, it } from "vitest";
import { describeIdentity, personOf } from "../../src/identity/person.js";
import { parseSpiffeId } from "../../src/identity/spiffe.js";
import { createRoleTable, parseGroupGrant, parseRoleGrant } from "../../src/identity/roles.js";

describe("a person's SPIFFE ID", () => {
  it("is the claim when it is a valid segment not starting with _, else _ + base64url", () => {
    expect(personOf("forelead", "alice").spiffeId).toBe("spiffe://forelead/users/alice");
    expect(personOf("forelead", "alice@example.com").spiffeId).toBe(
      "spiffe://forelead/users/_YWxpY2VAZXhhbXBsZS5jb20",
    );
    // A claim that looks like an encoding is encoded too, so two claims never share an ID.
    const tricky = personOf("forelead", "_YWxpY2VAZXhhbXBsZS5jb20").spiffeId;
    expect(tricky).not.toBe(personOf("forelead", "alice@example.com").spiffeId);
    for (const claim of ["auth0|123", "..", ".", "Zoë", "_x", "a/b", "x".repeat(256)]) {
      const id = personOf("forelead", claim).spiffeId;
      expect(() => parseSpiffeId(id), claim).not.toThrow();
      // Read back: the claim beside the ID, unless the ID holds the claim as it is.
      const plain = id === `spiffe://forelead/users/${claim}`;
      expect(describeIdentity(id), claim).toBe(plain ? id : `${id} (${JSON.stringify(claim)})`);
    }
    expect(() => personOf("forelead", "")).toThrow("the identity claim is empty");
    expect(() => personOf("forelead", "x".repeat(257))).toThrow("over the 256-byte limit");
  });
});

describe("delegates and group grants", () => {
  const dash = "spiffe://forelead/services/dashboard";
  it("a delegate holds no other role; a group never maps to delegate", () => {
    expect(() =>
      createRoleTable([parseRoleGrant(`${dash}=delegate`), parseRoleGrant(`${dash}=read`)]),
    ).toThrow("is granted delegate and another role");
    expect(() => parseGroupGrant("ops=delegate")).toThrow("delegate is a service's role");
    expect(() => parseGroupGrant("ops")).toThrow("use --sso-group GROUP=ROLE");
  });

  it("a person's roles are its own grants and its groups'", () => {
    const alice = personOf("forelead", "alice@example.com").spiffeId;
    const table = createRoleTable(
      [parseRoleGrant(`${alice}=read:w1`)],
      [],
      [parseGroupGrant("ops=enqueue:w3"), parseGroupGrant("a=b=admin")],
    );
    const roles = table.ofPerson(alice, ["ops"])!;
    expect([...roles.readWorkspaces]).toEqual(["w1"]);
    expect([...roles.enqueue]).toEqual(["w3"]);
    expect(roles.admin).toBe(false);
    expect(table.ofPerson(alice, ["a=b"])!.admin).toBe(true);
    expect(table.ofPerson("spiffe://forelead/users/bob", [])).toBeUndefined();
  });
});
