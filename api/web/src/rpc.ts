// A JSON-RPC 2.0 client over /rpc (subprotocol ballet.v1.json) that
// authenticates, answers heartbeats and reconnects by itself.
import { token } from "./api";

export type Params = Record<string, unknown>;
export type ConnState = "connecting" | "open" | "lost";

export class RpcError extends Error {
  constructor(
    public code: number,
    message: string,
    public data?: { code?: string },
  ) {
    super(message);
  }
}

interface Pending {
  resolve: (v: any) => void;
  reject: (e: Error) => void;
}

/** Rpc is one socket; its open listeners run after every (re)authentication. */
export class Rpc {
  private ws?: WebSocket;
  private nextID = 1;
  private pending = new Map<number, Pending>();
  private closed = false;
  private held = false;
  private retry = 0;
  private timer?: number;
  state: ConnState = "connecting";
  private notify = new Set<(method: string, params: any) => void>();
  private states = new Set<(s: ConnState) => void>();
  private opens = new Set<() => void>();

  /** on adds listeners of notifications, of the state and of every
   * (re)authenticated open; it returns their removal. */
  on(l: { notify?: (method: string, params: any) => void; state?: (s: ConnState) => void; open?: () => void }) {
    if (l.notify) this.notify.add(l.notify);
    if (l.state) this.states.add(l.state);
    if (l.open) this.opens.add(l.open);
    return () => {
      if (l.notify) this.notify.delete(l.notify);
      if (l.state) this.states.delete(l.state);
      if (l.open) this.opens.delete(l.open);
    };
  }

  constructor() {
    this.connect();
  }

  private setState(s: ConnState) {
    this.state = s;
    this.states.forEach((l) => l(s));
  }

  private connect() {
    if (this.closed || this.held) return;
    const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/rpc";
    const ws = new WebSocket(url, "ballet.v1.json");
    this.ws = ws;
    ws.onopen = async () => {
      try {
        await this.call("auth", { token: token() || "local" });
        this.retry = 0;
        this.setState("open");
        this.opens.forEach((l) => l());
      } catch (e) {
        this.setState("lost");
        ws.close();
      }
    };
    ws.onmessage = (ev) => this.receive(ev.data as string);
    ws.onclose = () => {
      if (this.ws !== ws) return;
      for (const p of this.pending.values()) p.reject(new RpcError(-32603, "the connection was lost"));
      this.pending.clear();
      if (this.closed) return;
      this.setState("lost");
      const delay = Math.min(5000, 250 * 2 ** this.retry++);
      this.timer = window.setTimeout(() => this.connect(), delay);
    };
  }

  private receive(raw: string) {
    let m: any;
    try {
      m = JSON.parse(raw);
    } catch {
      return;
    }
    if (m.id != null && (m.result !== undefined || m.error)) {
      const p = this.pending.get(m.id);
      if (!p) return;
      this.pending.delete(m.id);
      if (m.error) p.reject(new RpcError(m.error.code, m.error.message, m.error.data));
      else p.resolve(m.result);
      return;
    }
    if (m.method === "$/heartbeat") {
      this.send({ jsonrpc: "2.0", method: "$/heartbeat", params: { time: new Date().toISOString() } });
      return;
    }
    if (m.method) this.notify.forEach((l) => l(m.method, m.params));
  }

  private send(msg: unknown) {
    if (this.ws?.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(msg));
  }

  call<T = any>(method: string, params: Params): Promise<T> {
    const id = this.nextID++;
    return new Promise<T>((resolve, reject) => {
      if (this.ws?.readyState !== WebSocket.OPEN) {
        reject(new RpcError(-32603, "not connected"));
        return;
      }
      this.pending.set(id, { resolve, reject });
      this.send({ jsonrpc: "2.0", id, method, params });
    });
  }

  /** drop closes the socket as a network failure would; with hold, it
   * reconnects only once resume is called. */
  drop(hold = false) {
    this.held = hold;
    this.ws?.close();
  }

  resume() {
    this.held = false;
    window.clearTimeout(this.timer);
    this.connect();
  }

  close() {
    this.closed = true;
    window.clearTimeout(this.timer);
    this.ws?.close();
  }
}
