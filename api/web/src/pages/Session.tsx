// A planner session over /rpc: the transcript, the streaming answer, tool
// calls, queued turns, the composer and automatic resume.
import { Component } from "preact";
import { useEffect, useLayoutEffect, useMemo, useRef, useState } from "preact/hooks";
import { get, type Session } from "../api";
import { socket } from "../rpcclient";
import { RpcError, type ConnState } from "../rpc";
import { Transcript, type Entry, type Output, type Turn, type TurnState } from "../transcript";
import { useTurnWindow } from "../turnwindow";
import { Markdown } from "../ui";
import { ChangesetCard } from "./Changesets";

let watchCount = 0;

/** Outgoing is a message the human sent that the server has not taken yet:
 * it waits for the connection, or is on its way. Its turn id makes a
 * retry after a lost connection the same turn, never a second one. */
interface Outgoing {
  turn: string;
  text: string;
  state: "waiting" | "sending";
  /** interrupt stops the session's running and queued turns first. */
  interrupt?: boolean;
}

/** newTurnID is a random UUID (v4); crypto.randomUUID needs a secure
 * context, getRandomValues does not. */
function newTurnID(): string {
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = [...b].map((x) => x.toString(16).padStart(2, "0")).join("");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/** lostConnection tells a send the socket dropped under from a refusal. */
function lostConnection(e: unknown): boolean {
  return e instanceof RpcError && e.code === -32603 && /connect/.test(e.message);
}

export function SessionPage(props: { project: string; id: string }) {
  const tr = useMemo(() => new Transcript(), [props.id]);
  const [, setTick] = useState(0);
  const rerender = () => setTick((n) => n + 1);
  const [session, setSession] = useState<Session>();
  const [conn, setConn] = useState<ConnState>(socket().state);
  const [resumes, setResumes] = useState(0);
  const [error, setError] = useState("");
  // The outbox: what the human sent, in order, until the server took it.
  // One send at a time, so the server stores the messages as typed.
  const outbox = useRef<Outgoing[]>([]);
  const flushing = useRef(false);
  const end = useRef<HTMLDivElement>(null);

  const flush = async () => {
    if (flushing.current) return;
    flushing.current = true;
    try {
      while (outbox.current.length > 0 && socket().state === "open") {
        const m = outbox.current[0];
        m.state = "sending";
        rerender();
        try {
          await socket().call("planner.send", { session: props.id, text: m.text, turn: m.turn, ...(m.interrupt && { multitask: "interrupt" }) });
          outbox.current.shift();
        } catch (e: any) {
          if (lostConnection(e)) {
            m.state = "waiting"; // sent again, as the same turn, once the socket is back
            break;
          }
          outbox.current.shift();
          const first = m.text.split("\n")[0];
          setError(`Not sent (“${first.length > 60 ? first.slice(0, 57) + "…" : first}”): ${e.message}`);
        }
        rerender();
      }
    } finally {
      flushing.current = false;
      rerender();
    }
  };

  useEffect(() => {
    get<Session>(`/planner/sessions/${props.id}`).then(setSession, (e) => setError(e.message));
    const rpc = socket();
    let sub = "";
    let opened = 0;
    const watch = () => {
      sub = `session-${props.id}-${++watchCount}`;
      if (opened++ > 0) {
        tr.resumed();
        setResumes((n) => n + 1);
      }
      rpc.call("planner.watch", { subscription: sub, session: props.id, from_cursor: tr.cursor }).catch((e) => setError(e.message));
    };
    const off = rpc.on({
      open: () => {
        setError("");
        watch();
        flush();
      },
      state: setConn,
      notify: (method, p) => {
        if (method === "planner.output" && p.subscription === sub) {
          tr.apply(p as Output);
          rerender();
        } else if (method === "stream.closed" && p.subscription === sub) {
          watch();
        }
      },
    });
    if (rpc.state === "open") watch();
    // A test hook, as the socket's: apply an output as if it came from the
    // server.
    (window as any).__balletOutput = (o: Output) => {
      tr.apply(o);
      rerender();
    };
    return () => {
      off();
      // Leaving the page ends its watch: the socket stays for the next one.
      if (sub && rpc.state === "open") rpc.call("stream.unsubscribe", { subscription: sub }).catch(() => {});
    };
  }, [props.id]);

  // The page holds the last turns only; the earlier ones as the human
  // scrolls up. Scrolled to its end, it stays there as the transcript grows.
  const win = useTurnWindow(props.id, tr.blocks(), end);
  useLayoutEffect(() => {
    if (win.follow.current) end.current?.scrollIntoView({ block: "end" });
  }, [tr.entries.length, tr.entries[tr.entries.length - 1], outbox.current.length]);

  const send = (text: string, interrupt: boolean) => {
    setError("");
    win.follow.current = true; // the human's own message comes into view
    outbox.current.push({ turn: newTurnID(), text, state: "waiting", interrupt });
    rerender();
    flush();
  };
  const cancel = (turn: string) =>
    socket()
      .call("planner.cancel", { session: props.id, turn })
      .catch((e) => setError(e.message));

  const active = tr.active();
  // A message the server took shows in its turn's block; until then, here.
  const pending = outbox.current.filter((m) => !tr.turns.has(m.turn));
  return (
    <section class="session" data-cursor={tr.cursor} data-resumes={resumes} data-turns={win.shown.length + win.hidden}>
      <h1>{session?.title || "Session"}</h1>
      {conn !== "open" && (
        <div class="banner" role="status" data-testid="conn-banner">
          {conn === "lost"
            ? "Connection lost — reconnecting. What you send now is sent, in order, once the connection is back."
            : "Connecting…"}
        </div>
      )}
      {error && <div class="error" role="alert">{error}</div>}
      {win.hidden > 0 && (
        <div class="earlier" ref={win.top}>
          <button type="button" onClick={win.earlier}>
            Show earlier turns ({win.hidden} more)
          </button>
        </div>
      )}
      <ol class="transcript" aria-live="polite" ref={win.list}>
        {win.shown.map((b) => (
          <TurnBlock key={b.turn.id} id={b.turn.id} state={b.turn.state} entries={b.entries} />
        ))}
        {pending.map((m) => (
          <li key={m.turn} class="turn-block pending" data-turn={m.turn} data-state={m.state}>
            <ol>
              <li class="msg user">
                <Markdown src={m.text} />
                <span class="sending">{m.state === "sending" ? "Sending…" : "Waiting for the connection…"}</span>
              </li>
            </ol>
          </li>
        ))}
      </ol>
      {/* The turns in progress and the composer stay in view at the bottom;
          the page scrolls to its end, below them, as the transcript grows. */}
      <div class="dock">
        {active.length > 0 && <TurnList turns={active} cancel={cancel} />}
        <Composer send={send} running={active.some((t) => t.state === "running")} />
      </div>
      <div ref={end} />
    </section>
  );
}

interface TurnBlockProps {
  id: string;
  state: TurnState;
  entries: Entry[];
}

/** TurnBlock is one turn's block. It redraws only when the turn's state
 * changes or one of its entries is a new object (entries are immutable):
 * a delta redraws the live answer's block, not the whole transcript. */
class TurnBlock extends Component<TurnBlockProps> {
  shouldComponentUpdate(next: TurnBlockProps) {
    const prev = this.props;
    return (
      next.state !== prev.state ||
      next.entries.length !== prev.entries.length ||
      next.entries.some((e, i) => e !== prev.entries[i])
    );
  }
  render({ id, state, entries }: TurnBlockProps) {
    return (
      <li class="turn-block" data-turn={id} data-state={state}>
        <ol>
          {entries.map((e) => (
            <EntryItem key={e.key} e={e} />
          ))}
        </ol>
      </li>
    );
  }
}

/** EntryItem redraws an entry only when it is a new object. */
class EntryItem extends Component<{ e: Entry }> {
  shouldComponentUpdate(next: { e: Entry }) {
    return next.e !== this.props.e;
  }
  render({ e }: { e: Entry }) {
    return <EntryView e={e} />;
  }
}

function TurnList(props: { turns: Turn[]; cancel: (turn: string) => void }) {
  return (
    <ul class="turns" aria-label="Turns in progress">
      {props.turns.map((t, i) => (
        <li key={t.id} class={"turn " + t.state} data-turn={t.id} data-state={t.state}>
          {t.state === "running" ? (
            <>
              <span class="spinner" aria-hidden="true" /> Answering…
              <button class="stop" onClick={() => props.cancel(t.id)}>Stop</button>
            </>
          ) : (
            <>
              <span class="position">Queued · position {i}</span>
              <span class="sent">{t.text ?? ""}</span>
              <button class="cancel" onClick={() => props.cancel(t.id)}>Cancel</button>
            </>
          )}
        </li>
      ))}
    </ul>
  );
}

function Composer(props: { send: (text: string, interrupt: boolean) => void; running: boolean }) {
  const [text, setText] = useState("");
  const submit = (interrupt = false) => {
    const t = text.trim();
    if (!t) return;
    setText("");
    props.send(t, interrupt);
  };
  return (
    <form
      class="composer"
      onSubmit={(e) => {
        e.preventDefault();
        submit();
      }}
    >
      <textarea
        aria-label="Message"
        placeholder={props.running ? "The planner is answering; a message now waits its turn" : "Message the planner (Enter sends, Shift+Enter a new line)"}
        value={text}
        rows={3}
        onInput={(e) => setText((e.target as HTMLTextAreaElement).value)}
        onKeyDown={(e) => {
          if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
            e.preventDefault();
            submit();
          }
        }}
      />
      <button type="submit">Send</button>
      {props.running && (
        <button type="button" class="interrupt" title="Stop the running and queued turns and send this message now" onClick={() => submit(true)}>
          Stop and send
        </button>
      )}
    </form>
  );
}

function short(v: unknown): string {
  const s = JSON.stringify(v ?? {});
  return s.length > 80 ? s.slice(0, 77) + "…" : s;
}

function pretty(s: string): string {
  try {
    return JSON.stringify(JSON.parse(s), null, 2);
  } catch {
    return s;
  }
}

function EntryView({ e }: { e: Entry }) {
  switch (e.kind) {
    case "user":
      return (
        <li class="msg user">
          <Markdown src={e.text} />
        </li>
      );
    case "assistant":
      return (
        <li class={"msg assistant" + (e.live ? " live" : "")} data-source={e.live ? e.text : undefined}>
          <Markdown src={e.text} />
        </li>
      );
    case "tool": {
      const status = e.result !== undefined ? (e.isError ? "failed" : "ok") : e.ended ? (e.ended === "cancelled" ? "cancelled" : "interrupted") : "running";
      let changeset = "";
      if (e.name === "propose_changeset" && status === "ok") {
        try {
          changeset = JSON.parse(e.result!).id ?? "";
        } catch {}
      }
      return (
        <li class="tool" data-tool={e.name} data-status={status}>
          <details>
            <summary>
              <code class="name">{e.name}</code> <span class="input">{short(e.input)}</span>{" "}
              <span class={"status " + status}>{status}</span>
            </summary>
            <h4>Input</h4>
            <pre>{JSON.stringify(e.input ?? {}, null, 2)}</pre>
            {e.result !== undefined && (
              <>
                <h4>Result</h4>
                <pre>{pretty(e.result)}</pre>
              </>
            )}
          </details>
          {changeset && <ChangesetCard id={changeset} />}
        </li>
      );
    }
    case "compacted":
      return <li class="marker compacted">Earlier conversation compacted (messages up to #{e.upTo} summarised)</li>;
    case "error":
      return <li class="marker error">{e.text}</li>;
    case "done":
      return <li class="marker done">Turn ended: {e.reason}</li>;
  }
}
