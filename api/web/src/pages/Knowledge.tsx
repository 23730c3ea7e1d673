// An organization's knowledge entries, rendered as sanitized Markdown, with
// a search over them and links back to the projects each one is about.
import { useState } from "preact/hooks";
import { get, type KnowledgeEntry, type KnowledgeHit, type Page } from "../api";
import { Link } from "../router";
import { ErrorLine, Markdown, useLoad, when } from "../ui";

export function KnowledgePage(props: { org: string }) {
  const [q, setQ] = useState("");
  const [query, setQuery] = useState("");
  const { data, error } = useLoad(() => get<Page<KnowledgeEntry>>(`/organizations/${props.org}/knowledge/entries`), [props.org]);
  const found = useLoad(
    () => (query ? get<Page<KnowledgeHit>>(`/organizations/${props.org}/knowledge/search?q=${encodeURIComponent(query)}`) : Promise.resolve(undefined)),
    [props.org, query],
  );
  // While searching, the entries found, best first.
  const byID = new Map((data?.items ?? []).map((k) => [k.id, k]));
  const shown = query
    ? (found.data?.items ?? []).flatMap((h) => (byID.has(h.id) ? [byID.get(h.id)!] : []))
    : (data?.items ?? []);
  return (
    <section>
      <h1>Knowledge</h1>
      <form
        class="search"
        role="search"
        onSubmit={(e) => {
          e.preventDefault();
          setQuery(q.trim());
        }}
      >
        <input type="search" aria-label="Search knowledge" placeholder="Search the knowledge base" value={q} onInput={(e) => setQ((e.target as HTMLInputElement).value)} />
        <button type="submit">Search</button>
        {query && (
          <button
            type="button"
            onClick={() => {
              setQ("");
              setQuery("");
            }}
          >
            Show all
          </button>
        )}
      </form>
      <ErrorLine error={error || found.error} />
      {query && found.data && <p class="meta found">{found.data.items.length === 0 ? `Nothing found for “${query}”.` : `${found.data.items.length} found for “${query}”.`}</p>}
      {shown.map((k) => (
        <article key={k.id} class="card knowledge" data-entry={k.id}>
          <h2>{k.title}</h2>
          <p class="meta">
            Updated {when(k.updated_at)}
            {(k.projects ?? []).length > 0 && (
              <>
                {" · "}
                {(k.projects ?? []).map((p, i) => (
                  <span key={p}>
                    {i > 0 && ", "}
                    <Link href={`/projects/${p}`}>{p}</Link>
                  </span>
                ))}
              </>
            )}
          </p>
          <Markdown src={k.body} />
        </article>
      ))}
      {data && data.items.length === 0 && <p class="empty">No entries.</p>}
    </section>
  );
}
