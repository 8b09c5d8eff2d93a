/**
 * Most leases one claim request takes (ClaimRequest.maxLeases, `POST /v1/runner/claims`); the
 * runner's free slots bound it further. The broker refuses more; the runner agent asks at most
 * this.
 */
export const maxLeasesPerClaim = 32;
