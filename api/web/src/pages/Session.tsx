// A planner session over /rpc: the transcript, the streaming answer, tool
// calls, queued turns, the composer and automatic resume.
import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import { get, type Session } from "../api";
import { socket } from "../rpcclient";
import type { ConnState } from "../rpc";
import { Transcript, type Entry, type Output, type Turn } from "../transcript";
import { Markdown } from "../ui";
import { ChangesetCard } from "./Changesets";

let watchCount = 0;

export function SessionPage(props: { project: string; id: string }) {
  const tr = useMemo(() => new Transcript(), [props.id]);
  const [, setTick] = useState(0);
  const rerender = () => setTick((n) => n + 1);
  const [session, setSession] = useState<Session>();
  const [conn, setConn] = useState<ConnState>(socket().state);
  const [resumes, setResumes] = useState(0);
  const [error, setError] = useState("");
  const sent = useRef(new Map<string, string>()); // turn → text sent from here
  const end = useRef<HTMLDivElement>(null);

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
      open: watch,
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
    return () => {
      off();
      // Leaving the page ends its watch: the socket stays for the next one.
      if (sub && rpc.state === "open") rpc.call("stream.unsubscribe", { subscription: sub }).catch(() => {});
    };
  }, [props.id]);

  useEffect(() => end.current?.scrollIntoView({ block: "end" }), [tr.entries.length, tr.entries[tr.entries.length - 1]]);

  const send = async (text: string) => {
    setError("");
    try {
      const r = await socket().call<{ turn: string; position: number }>("planner.send", { session: props.id, text });
      sent.current.set(r.turn, text);
      rerender();
    } catch (e: any) {
      setError(e.message);
      throw e;
    }
  };
  const cancel = (turn: string) =>
    socket()
      .call("planner.cancel", { session: props.id, turn })
      .catch((e) => setError(e.message));

  const active = tr.active();
  return (
    <section class="session" data-cursor={tr.cursor} data-resumes={resumes}>
      <h1>{session?.title || "Session"}</h1>
      {conn !== "open" && (
        <div class="banner" role="status" data-testid="conn-banner">
          {conn === "lost" ? "Connection lost — reconnecting; nothing you sent is lost." : "Connecting…"}
        </div>
      )}
      {error && <div class="error" role="alert">{error}</div>}
      <ol class="transcript" aria-live="polite">
        {tr.entries.map((e) => (
          <EntryView key={e.key} e={e} />
        ))}
      </ol>
      <div ref={end} />
      {active.length > 0 && <TurnList turns={active} sent={sent.current} cancel={cancel} />}
      <Composer send={send} running={active.some((t) => t.state === "running")} />
    </section>
  );
}

function TurnList(props: { turns: Turn[]; sent: Map<string, string>; cancel: (turn: string) => void }) {
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
              <span class="sent">{props.sent.get(t.id) ?? ""}</span>
              <button class="cancel" onClick={() => props.cancel(t.id)}>Cancel</button>
            </>
          )}
        </li>
      ))}
    </ul>
  );
}

function Composer(props: { send: (text: string) => Promise<void>; running: boolean }) {
  const [text, setText] = useState("");
  const submit = async () => {
    const t = text.trim();
    if (!t) return;
    setText("");
    try {
      await props.send(t);
    } catch {
      setText(t);
    }
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
      const status = e.result === undefined ? "running" : e.isError ? "failed" : "ok";
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
