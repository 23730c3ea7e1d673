// An organization's knowledge entries, rendered as sanitized Markdown.
import { get, type KnowledgeEntry, type Page } from "../api";
import { ErrorLine, Markdown, useLoad, when } from "../ui";

export function KnowledgePage(props: { org: string }) {
  const { data, error } = useLoad(() => get<Page<KnowledgeEntry>>(`/organizations/${props.org}/knowledge/entries`), [props.org]);
  return (
    <section>
      <h1>Knowledge</h1>
      <ErrorLine error={error} />
      {data?.items.map((k) => (
        <article key={k.id} class="card knowledge" data-entry={k.id}>
          <h2>{k.title}</h2>
          <p class="meta">Updated {when(k.updated_at)}</p>
          <Markdown src={k.body} />
        </article>
      ))}
      {data && data.items.length === 0 && <p class="empty">No entries.</p>}
    </section>
  );
}
