// The host interface of spring:connector@0.3.0 as componentize-js presents it to the guest
// (resolved when the component is built, not by Node).
declare module "spring:connector/host@0.3.0" {
  export type LogLevel = "trace" | "debug" | "info" | "warn" | "error";
  export interface AccessToken {
    token: string;
    expiresAt: string;
  }
  export function log(level: LogLevel, message: string): void;
  /** Throws (with the host's reason as `payload`) when the host refuses. */
  export function githubInstallationToken(installationId: bigint): AccessToken;
  export function secret(name: string): string | undefined;
}
