// Changesets: each operation as a readable diff against the current item,
// chosen by checkbox, applied or rejected; conflicts explained in place.
import { useEffect, useLayoutEffect, useRef, useState } from "preact/hooks";
import { ApiError, get, post, type Changeset, type Item, type Operation, type Page } from "../api";
import { Link } from "../router";
import { ErrorLine, useLoad, when } from "../ui";

const statuses = ["proposed", "applied", "rejected"];

export function ChangesetsPage(props: { project: string; status: string }) {
  const status = statuses.includes(props.status) ? props.status : "proposed";
  const { data, error, reload } = useLoad(
    () => get<Page<Changeset>>(`/projects/${props.project}/changesets?status=${status}`),
    [props.project, status],
  );
  const [decided, setDecided] = useState<Changeset[]>([]);
  useEffect(() => setDecided([]), [props.project, status]);
  return (
    <section>
      <h1>Changesets</h1>
      <nav class="tabs" aria-label="Status">
        {statuses.map((s) => (
          <Link key={s} href={`/projects/${props.project}/changesets?status=${s}`} aria-current={s === status ? "page" : undefined}>
            {s}
          </Link>
        ))}
      </nav>
      <ErrorLine error={error} />
      {data && data.items.length === 0 && decided.length === 0 && <p class="empty">No {status} changesets.</p>}
      {/* A changeset decided here stays, with what was done, until the page
          is left: one keyed list, so that its card keeps its state. */}
      {[...decided, ...(data?.items ?? []).filter((c) => !decided.some((d) => d.id === c.id))].map((c) => (
        <ChangesetCard
          key={c.id}
          id={c.id}
          initial={c}
          onChange={(cs) => {
            setDecided((d) => [...d, cs]);
            reload();
          }}
        />
      ))}
    </section>
  );
}

/** refsOf lists the $refs an operation uses, with the field naming each. */
function refsOf(op: Operation): string[] {
  const out: string[] = [];
  const add = (v?: string | null) => v && v.startsWith("$") && out.push(v.slice(1));
  add(op.update?.item);
  add(op.update?.epic);
  add(op.update?.milestone);
  add(op.create?.epic);
  add(op.create?.milestone);
  add(op.dependency?.from);
  add(op.dependency?.to);
  return out;
}

/** decidedNotice says what a decision here did. */
function DecidedNotice(props: { cs: Changeset; reason?: string }) {
  const { cs } = props;
  if (cs.status === "rejected") {
    return (
      <p class="decided" role="status">
        Rejected{props.reason ? ` — reason: ${props.reason}` : ""}. Nothing in the plan changed.
      </p>
    );
  }
  const applied = cs.applied_operations ?? [];
  const made = (cs.results ?? []).filter((r) => r.item);
  return (
    <div class="decided" role="status">
      <p>
        Applied {applied.length} of {cs.operations.length} operation{cs.operations.length === 1 ? "" : "s"}
        {made.length > 0 ? ":" : "."}
      </p>
      {made.length > 0 && (
        <ul class="made">
          {made.map((r, i) => {
            const op = cs.operations[applied[(cs.results ?? []).indexOf(r)] ?? i];
            return (
              <li key={r.item}>
                {op?.kind === "create_item" ? "Created " : "Updated "}
                <Link href={`/projects/${cs.project}/board?item=${r.item}`}>{r.item}</Link>
                {op?.create?.title ? ` “${op.create.title}”` : ""}
              </li>
            );
          })}
        </ul>
      )}
    </div>
  );
}

export function ChangesetCard(props: { id: string; initial?: Changeset; onChange?: (cs: Changeset) => void }) {
  const [cs, setCs] = useState<Changeset | undefined>(props.initial);
  const [items, setItems] = useState<Record<string, Item>>({});
  const [chosen, setChosen] = useState<Set<number>>(new Set());
  const [error, setError] = useState("");
  const [opErrors, setOpErrors] = useState<Record<number, string>>({});
  const [busy, setBusy] = useState(false);
  // decided is set once a decision made here succeeded; rejecting holds
  // the reason being written.
  const [decided, setDecided] = useState<{ reason?: string }>();
  const [rejecting, setRejecting] = useState<string>();

  // A card that loads while the page is scrolled to its end (a session
  // following its transcript) keeps the end in view as it grows.
  const stick = useRef(false);
  const load = () =>
    get<Changeset>(`/changesets/${props.id}`).then(
      (c) => {
        stick.current = window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 2;
        setCs(c);
      },
      (e) => setError(e.message),
    );
  useLayoutEffect(() => {
    if (stick.current) window.scrollTo(0, document.documentElement.scrollHeight);
    stick.current = false;
  }, [cs]);
  useEffect(() => {
    if (!props.initial) load();
  }, [props.id]);
  useEffect(() => {
    if (!cs) return;
    setChosen(new Set(cs.operations.map((_, i) => i)));
    const keys = new Set<string>();
    for (const op of cs.operations) {
      for (const k of [op.update?.item, op.dependency?.from, op.dependency?.to]) if (k && !k.startsWith("$")) keys.add(k);
    }
    Promise.all([...keys].map((k) => get<Item>(`/items/${k}`).then((it) => [k, it] as const, () => [k, undefined] as const))).then(
      (pairs) => setItems(Object.fromEntries(pairs.filter((p) => p[1])) as Record<string, Item>),
    );
  }, [cs?.id, cs?.status]);
  if (!cs) return <div class="card changeset">{error || "Loading changeset…"}</div>;

  const refIndex: Record<string, number> = {};
  cs.operations.forEach((op, i) => op.ref && (refIndex[op.ref] = i));
  const label = (k: string) => {
    if (k.startsWith("$")) {
      const i = refIndex[k.slice(1)];
      const t = i !== undefined ? cs.operations[i].create?.title : undefined;
      return t ? `“${t}” (new, operation ${i + 1})` : k;
    }
    const it = items[k];
    return it ? `${k} “${it.title}”` : k;
  };
  const localConflict = (i: number): string => {
    if (!chosen.has(i)) return "";
    for (const r of refsOf(cs.operations[i])) {
      const j = refIndex[r];
      if (j !== undefined && !chosen.has(j)) return `Uses ${label("$" + r)}, which is created by operation ${j + 1}: choose it too, or leave this one out.`;
    }
    return "";
  };
  const proposed = cs.status === "proposed";
  const conflicts = cs.operations.map((_, i) => localConflict(i));

  const apply = async () => {
    setBusy(true);
    setError("");
    setOpErrors({});
    try {
      const out = await post<Changeset>(`/changesets/${cs.id}/apply`, { operations: [...chosen].sort((a, b) => a - b) });
      setCs(out);
      setDecided({});
      window.dispatchEvent(new CustomEvent("ballet:changed"));
      props.onChange?.(out);
    } catch (e) {
      explain(e);
    } finally {
      setBusy(false);
    }
  };
  const reject = async () => {
    setBusy(true);
    setError("");
    const reason = (rejecting ?? "").trim();
    try {
      const out = await post<Changeset>(`/changesets/${cs.id}/reject`, reason ? { reason } : {});
      setCs(out);
      setRejecting(undefined);
      setDecided({ reason });
      props.onChange?.(out);
    } catch (e) {
      explain(e);
    } finally {
      setBusy(false);
    }
  };
  const explain = (e: unknown) => {
    const msg = (e as Error).message;
    const m = /^operations\[(\d+)\]: (.*)$/s.exec(msg);
    const idx = e instanceof ApiError && typeof e.details?.operation === "number" ? (e.details.operation as number) : m ? Number(m[1]) : -1;
    if (idx >= 0) setOpErrors({ [idx]: m ? m[2] : msg });
    else setError(msg);
  };

  return (
    <article class={"card changeset " + cs.status} data-changeset={cs.id} data-status={cs.status}>
      <header>
        <h2>{cs.title}</h2>
        <span class={"badge " + cs.status}>{cs.status}</span>
      </header>
      {cs.summary && <p class="summary">{cs.summary}</p>}
      <p class="meta">
        Proposed {when(cs.created_at)} by {cs.proposed_by.acting_for ? `the planner for ${cs.proposed_by.acting_for}` : cs.proposed_by.subject}
        {cs.session_id && (
          <>
            {" · "}
            <Link href={`/projects/${cs.project}/sessions/${cs.session_id}`}>session</Link>
          </>
        )}
      </p>
      <ol class="ops">
        {cs.operations.map((op, i) => {
          const applied = cs.applied_operations?.includes(i);
          const result = cs.results?.[cs.applied_operations?.indexOf(i) ?? -1];
          return (
            <li key={i} class="op" data-op={i}>
              <label class="choose">
                {proposed ? (
                  <input
                    type="checkbox"
                    checked={chosen.has(i)}
                    aria-label={`Choose operation ${i + 1}`}
                    onChange={(e) => {
                      const n = new Set(chosen);
                      (e.target as HTMLInputElement).checked ? n.add(i) : n.delete(i);
                      setChosen(n);
                    }}
                  />
                ) : (
                  <span class={"applied " + (applied ? "yes" : "no")}>{applied ? "✓ applied" : "– not applied"}</span>
                )}
              </label>
              <OpDiff op={op} current={op.update ? items[op.update.item] : undefined} label={label} />
              {result?.item && <p class="result">Created or updated {result.item}</p>}
              {(opErrors[i] || (proposed && conflicts[i])) && (
                <p class="conflict" role="alert">
                  {opErrors[i] || conflicts[i]}
                </p>
              )}
            </li>
          );
        })}
      </ol>
      <ErrorLine error={error} />
      {decided && <DecidedNotice cs={cs} reason={decided.reason} />}
      {proposed && rejecting === undefined && (
        <footer>
          <button class="primary apply" disabled={busy || chosen.size === 0 || conflicts.some(Boolean)} onClick={apply}>
            Apply chosen ({chosen.size} of {cs.operations.length})
          </button>
          <button class="reject" disabled={busy} onClick={() => setRejecting("")}>
            Reject…
          </button>
        </footer>
      )}
      {proposed && rejecting !== undefined && (
        <footer class="rejecting">
          <textarea
            aria-label="Reason for rejecting (optional)"
            placeholder="Why not? (optional; kept with the changeset's history)"
            value={rejecting}
            rows={2}
            onInput={(e) => setRejecting((e.target as HTMLTextAreaElement).value)}
          />
          <button class="reject confirm" disabled={busy} onClick={reject}>
            Reject
          </button>
          <button class="cancel" disabled={busy} onClick={() => setRejecting(undefined)}>
            Keep it
          </button>
        </footer>
      )}
    </article>
  );
}

function Field(props: { name: string; before?: unknown; after?: unknown }) {
  const fmt = (v: unknown) => (Array.isArray(v) ? v.map((x) => "• " + x).join("\n") : v == null || v === "" ? "—" : String(v));
  if (props.after === undefined) return null;
  const changed = props.before === undefined || fmt(props.before) !== fmt(props.after);
  return (
    <div class="field">
      <span class="fname">{props.name}</span>
      {props.before !== undefined && changed && <del>{fmt(props.before)}</del>}
      <ins class={changed ? "" : "same"}>{fmt(props.after)}</ins>
    </div>
  );
}

function OpDiff(props: { op: Operation; current?: Item; label: (k: string) => string }) {
  const { op, current } = props;
  if (op.kind === "create_item" && op.create) {
    const c = op.create;
    return (
      <div class="diff create">
        <p class="what">
          New {c.kind}
          {op.ref ? ` ($${op.ref})` : ""}: <strong>{c.title}</strong>
        </p>
        <Field name="Type" after={c.type} />
        <Field name="Description" after={c.description} />
        <Field name="Acceptance criteria" after={c.acceptance_criteria} />
        <Field name="Epic" after={c.epic ? props.label(c.epic) : undefined} />
        <Field name="Milestone" after={c.milestone ? props.label(c.milestone) : undefined} />
      </div>
    );
  }
  if (op.kind === "update_item" && op.update) {
    const u = op.update;
    const stale = current && u.version && current.version !== u.version;
    return (
      <div class="diff update">
        <p class="what">
          Change <strong>{props.label(u.item)}</strong>
        </p>
        {stale && (
          <p class="conflict">
            {u.item} has changed since this was proposed (proposed against version {u.version}, now version {current!.version}): applying
            it would be refused; ask the planner for a fresh proposal.
          </p>
        )}
        <Field name="Title" before={current?.title} after={u.title} />
        <Field name="Type" before={current?.type} after={u.type} />
        <Field name="Description" before={current?.description} after={u.description} />
        <Field name="Acceptance criteria" before={current?.acceptance_criteria} after={u.acceptance_criteria} />
        <Field name="Epic" before={current?.epic} after={u.epic} />
        <Field name="Milestone" before={current?.milestone} after={u.milestone} />
      </div>
    );
  }
  if (op.kind === "add_dependency" && op.dependency) {
    const d = op.dependency;
    return (
      <div class="diff dependency">
        <p class="what">
          New dependency: {props.label(d.from)} <strong>{d.type}</strong> {props.label(d.to)}
        </p>
      </div>
    );
  }
  return <pre class="diff">{JSON.stringify(op, null, 2)}</pre>;
}
