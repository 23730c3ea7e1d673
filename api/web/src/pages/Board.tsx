// The project's tickets by state: runnable ones marked, blockers shown,
// refreshed live from the project's event stream.
import { useEffect, useState } from "preact/hooks";
import { get, type Dependency, type Item, type Page } from "../api";
import { navigate } from "../router";
import { socket } from "../rpcclient";
import { ErrorLine, Markdown, useLoad } from "../ui";

const columns = ["backlog", "ready", "in_progress", "waiting_for_answer", "paused", "done", "cancelled"];

interface BoardData {
  tickets: Item[];
  runnable: Set<string>;
  blockers: Record<string, string[]>;
}

async function loadBoard(project: string): Promise<BoardData> {
  const [items, runnable] = await Promise.all([
    get<Page<Item>>(`/projects/${project}/items?kind=ticket`),
    get<Page<Item>>(`/projects/${project}/runnable`),
  ]);
  const open = items.items.filter((i) => i.state !== "done" && i.state !== "cancelled");
  const deps = await Promise.all(open.map((i) => get<Page<Dependency>>(`/items/${i.key}/dependencies`).then((d) => [i.key, d.items] as const)));
  const state = Object.fromEntries(items.items.map((i) => [i.key, i.state]));
  const blockers: Record<string, string[]> = {};
  for (const [key, ds] of deps) {
    blockers[key] = ds.filter((d) => d.type === "blocks" && d.to === key && state[d.from] !== "done" && state[d.from] !== "cancelled").map((d) => d.from);
  }
  return { tickets: items.items, runnable: new Set(runnable.items.map((i) => i.key)), blockers };
}

/** ItemPanel shows one item, opened from its card (?item=KEY). */
function ItemPanel(props: { project: string; item: string; blockers: string[] }) {
  const { data: it, error } = useLoad(() => get<Item>(`/items/${props.item}`), [props.item]);
  const close = () => navigate(`/projects/${props.project}/board`);
  return (
    <section class="card item-panel" role="region" aria-label={`Item ${props.item}`} data-item={props.item}
      onKeyDown={(e) => e.key === "Escape" && close()}>
      <header>
        <h2>
          <code>{props.item}</code> {it?.title ?? ""}
        </h2>
        <button class="close" onClick={close} aria-label="Close">
          ×
        </button>
      </header>
      <ErrorLine error={error} />
      {it && (
        <>
          <p class="meta">
            {it.kind}
            {it.type ? ` · ${it.type}` : ""} · {it.state.replace(/_/g, " ")} · version {it.version}
            {it.epic ? ` · epic ${it.epic}` : ""}
            {it.milestone ? ` · milestone ${it.milestone}` : ""}
          </p>
          {props.blockers.length > 0 && <p class="blocked">Blocked by {props.blockers.join(", ")}</p>}
          {it.description ? <Markdown src={it.description} /> : <p class="empty">No description.</p>}
          {it.acceptance_criteria.length > 0 && (
            <>
              <h3>Acceptance criteria</h3>
              <ul class="criteria">
                {it.acceptance_criteria.map((c, i) => (
                  <li key={i}>{c}</li>
                ))}
              </ul>
            </>
          )}
        </>
      )}
    </section>
  );
}

export function BoardPage(props: { project: string; item?: string }) {
  const [data, setData] = useState<BoardData>();
  const [error, setError] = useState("");
  const [live, setLive] = useState<"events" | "refresh" | "">("");

  useEffect(() => {
    let alive = true;
    let pending = false;
    const refresh = () => {
      if (pending) return;
      pending = true;
      loadBoard(props.project)
        .then((d) => alive && (setData(d), setError("")), (e) => alive && setError(e.message))
        .finally(() => (pending = false));
    };
    refresh();
    const rpc = socket();
    let sub = "";
    let n = 0;
    const subscribe = () => {
      sub = `board-${props.project}-${++n}`;
      rpc.call("stream.subscribe", { subscription: sub, stream: `project:${props.project}` }).then(
        () => alive && setLive("events"),
        () => alive && setLive("refresh"),
      );
      refresh();
    };
    // Without the project's event stream, the board follows what can
    // change it from here: applied changesets and planner tool results.
    const off = rpc.on({
      open: subscribe,
      notify: (method, p) => {
        if (method === "stream.event" && p.subscription === sub) refresh();
        else if (method === "stream.closed" && p.subscription === sub) subscribe();
        else if (method === "planner.output" && p.type === "tool_result") refresh();
      },
    });
    if (rpc.state === "open") subscribe();
    window.addEventListener("ballet:changed", refresh);
    return () => {
      alive = false;
      off();
      window.removeEventListener("ballet:changed", refresh);
      if (sub && rpc.state === "open") rpc.call("stream.unsubscribe", { subscription: sub }).catch(() => {});
    };
  }, [props.project]);

  return (
    <section>
      <h1>Board</h1>
      <p class="meta">
        {live === "events" ? "Live: updated from the project's events." : live === "refresh" ? "Updated when a changeset is applied here." : ""}
      </p>
      <ErrorLine error={error} />
      {props.item && <ItemPanel project={props.project} item={props.item} blockers={data?.blockers[props.item] ?? []} />}
      <div class="board">
        {columns.map((col) => {
          const cards = data?.tickets.filter((t) => t.state === col) ?? [];
          if (cards.length === 0 && (col === "paused" || col === "waiting_for_answer" || col === "cancelled")) return null;
          return (
            <div key={col} class="column" data-state={col}>
              <h2>
                {col.replace(/_/g, " ")} <span class="count">{cards.length}</span>
              </h2>
              <ul>
                {cards.map((t) => (
                  <li key={t.key}>
                    <button
                      type="button"
                      class={"ticket" + (data!.runnable.has(t.key) ? " runnable" : "") + (props.item === t.key ? " open" : "")}
                      data-key={t.key}
                      aria-expanded={props.item === t.key}
                      onClick={() => navigate(`/projects/${props.project}/board?item=${t.key}`)}
                    >
                      <code>{t.key}</code> {t.title}
                      {data!.runnable.has(t.key) && <span class="badge runnable">runnable</span>}
                      {(data!.blockers[t.key] ?? []).length > 0 && <span class="blocked">Blocked by {data!.blockers[t.key].join(", ")}</span>}
                    </button>
                  </li>
                ))}
              </ul>
            </div>
          );
        })}
      </div>
    </section>
  );
}
