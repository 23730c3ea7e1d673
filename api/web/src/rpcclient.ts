// The app's one socket, opened once signed in.
import { Rpc } from "./rpc";

let rpc: Rpc | undefined;

export function socket(): Rpc {
  if (!rpc) {
    rpc = new Rpc();
    // Test and debugging hooks: drop the socket as a network failure would.
    (window as any).__balletDropSocket = (hold?: boolean) => rpc?.drop(!!hold);
    (window as any).__balletResumeSocket = () => rpc?.resume();
  }
  return rpc;
}

export function closeSocket() {
  rpc?.close();
  rpc = undefined;
}
