// Projects by organization, and a project's planner sessions.
import { useState } from "preact/hooks";
import { get, post, projectsOfAll, type Page, type Session } from "../api";
import { Link, navigate } from "../router";
import { ErrorLine, useLoad, when } from "../ui";

export function ProjectsPage() {
  const { data, error } = useLoad(projectsOfAll, []);
  return (
    <section>
      <h1>Projects</h1>
      <ErrorLine error={error} />
      {data?.map(({ org, projects }) => (
        <div key={org.id} class="org">
          <h2>
            {org.name} <Link href={`/orgs/${org.key}/knowledge`} class="small">knowledge</Link>
          </h2>
          <ul class="cards">
            {projects.map((p) => (
              <li key={p.id} class="card project">
                <Link href={`/projects/${p.key}`}>
                  <strong>{p.name}</strong> <code>{p.key}</code>
                </Link>
                <p>{p.description}</p>
              </li>
            ))}
            {projects.length === 0 && <li class="empty">No projects.</li>}
          </ul>
        </div>
      ))}
    </section>
  );
}

export function SessionsPage(props: { project: string }) {
  const { data, error } = useLoad(() => get<Page<Session>>(`/projects/${props.project}/planner/sessions`), [props.project]);
  const [title, setTitle] = useState("");
  const [err, setErr] = useState("");
  const create = async (e: Event) => {
    e.preventDefault();
    try {
      const s = await post<Session>(`/projects/${props.project}/planner/sessions`, { title: title.trim() || "New session" });
      navigate(`/projects/${props.project}/sessions/${s.id}`);
    } catch (x: any) {
      setErr(x.message);
    }
  };
  const sessions = [...(data?.items ?? [])].sort((a, b) => b.updated_at.localeCompare(a.updated_at));
  return (
    <section>
      <h1>Planner sessions</h1>
      <form class="row" onSubmit={create}>
        <input aria-label="Session title" placeholder="What do you want to plan?" value={title} onInput={(e) => setTitle((e.target as HTMLInputElement).value)} />
        <button type="submit" class="primary">New session</button>
      </form>
      <ErrorLine error={error || err} />
      <ul class="list sessions">
        {sessions.map((s) => (
          <li key={s.id}>
            <Link href={`/projects/${props.project}/sessions/${s.id}`}>{s.title || "Untitled"}</Link>
            <span class="meta">
              {s.running && <span class="badge running">running</span>} {s.created_by} · {when(s.updated_at)}
            </span>
          </li>
        ))}
        {data && sessions.length === 0 && <li class="empty">No sessions yet.</li>}
      </ul>
    </section>
  );
}
