"""`search`: multi-hop questions over an embedded synthetic knowledge graph, answered with tools.

The assistant calls `search` and `open`; some trajectories contain an erroneous call (a page that
does not exist) that is corrected later — that assistant turn is flagged `error` so SFT keeps it in
context with loss mask 0. Some questions ask about a company the graph does not have: the search
finds nothing and the reference answer is "unknown".
"""

from __future__ import annotations

import random
from dataclasses import dataclass

SYLLABLES = ("ka", "lo", "mi", "ra", "ven", "tor", "zu", "nel", "qua", "sir", "dor", "bex", "fa", "lin")

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the knowledge base; returns matching page titles.",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "open",
            "description": "Open a page by its exact title.",
            "parameters": {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]},
        },
    },
]


@dataclass(frozen=True)
class KnowledgeGraph:
    """Companies founded by people born in cities: enough structure for two-hop questions."""

    pages: dict[str, str]
    founder_of: dict[str, str]
    birthplace_of: dict[str, str]

    def search(self, query: str) -> str:
        hits = sorted(title for title in self.pages if query.lower() in title.lower())
        return ", ".join(hits[:5]) if hits else "No results."

    def open(self, title: str) -> str:
        return self.pages.get(title, f"Error: no page titled '{title}'.")


def _name(rng: random.Random, words: int) -> str:
    """Names are words of one syllable: a name is a few tokens, each frequent in training, so copying
    one from the question or a tool result is copying well-trained tokens. Trained on search alone
    (batch 32), the demo model succeeded on every held-out episode after 250 steps (300 before the
    questions about unknown companies); with names of two-syllable words (196 rarer tokens) it had
    not started copying at 300 steps and reached 74% at 400. Attaching the leading space to each
    word (" Qua" rather than " ", "Qua") made copying slower: 19% success at 250 steps."""
    return " ".join(rng.choice(SYLLABLES).capitalize() for _ in range(words))


# Enough companies that a model memorizing the training graph's facts learns nothing for the held-out
# graph: it has to copy names from the question and the tool results.
COMPANIES = 1000


def build_graph(seed: int, companies: int = COMPANIES) -> KnowledgeGraph:
    rng = random.Random(f"search-graph:{seed}")
    cities = sorted({_name(rng, 2) + " City" for _ in range(companies // 10)})
    pages, founder_of, birthplace_of = {}, {}, {}
    # A company's bare name is never a person's: opening it is the erroneous call episodes correct.
    taken: set[str] = set()
    for _ in range(companies * 20):
        if len(founder_of) == companies:
            break
        bare, person = _name(rng, 3), _name(rng, 3)
        if bare == person or bare in taken or person in taken:
            continue
        taken |= {bare, person}
        company, city = bare + " Corp", rng.choice(cities)
        founder_of[company], birthplace_of[person] = person, city
        pages[company] = f"{company} is a company founded by {person}."
        pages[person] = f"{person} is an entrepreneur born in {city}."
    for city in cities:
        pages[city] = f"{city} is a city."
    return KnowledgeGraph(pages, founder_of, birthplace_of)


@dataclass(frozen=True)
class SearchEpisode:
    id: str
    question: str
    answer: str
    messages: tuple[dict, ...]


def _call(name: str, reasoning: str, **arguments: str) -> dict:
    return {
        "role": "assistant",
        "reasoning_content": reasoning,
        "content": "",
        "tool_calls": [{"name": name, "arguments": arguments}],
    }


# What an episode answers when the knowledge base has no page for the company asked about.
UNKNOWN = "unknown"


def unknown_company(graph: KnowledgeGraph, rng: random.Random) -> str:
    """A company name that `search` finds nothing for."""
    while True:
        company = _name(rng, 3) + " Corp"
        if graph.search(company) == "No results.":
            return company


def make_episode(
    graph: KnowledgeGraph, company: str, rng: random.Random, episode_id: str, with_error: bool, gives_up: bool = False
) -> SearchEpisode:
    """The reference trajectory for the question about `company`, which may be absent from the graph.

    `with_error`: one call opens a wrong title and the next corrects it. `gives_up`: the wrong title
    is opened twice and the agent answers "unknown" rather than go on calling a tool that keeps
    failing (the episode's reference answer stays the true city)."""
    question = f"In which city was the founder of {company} born?"
    messages: list[dict] = [{"role": "user", "content": question}]

    def step(name: str, reasoning: str, error: bool = False, **arguments: str) -> None:
        call = _call(name, reasoning, **arguments)
        if error:
            call["error"] = True
        messages.append(call)
        result = graph.search(arguments["query"]) if name == "search" else graph.open(arguments["title"])
        messages.append({"role": "tool", "content": result})

    # Reasoning before a call names no entity: the tiny model, having seen names mostly inside tool
    # arguments, closed the argument right after a name in its reasoning (a quarter of turns malformed).
    step("search", "Search for the company.", query=company)
    if company not in graph.founder_of:
        # The agent says it does not know instead of guessing. This also keeps the context after a
        # fruitless search in distribution: the demo model, which had never seen one, malformed the
        # turns that followed.
        messages.append(
            {"role": "assistant", "reasoning_content": "No page matches the company.", "content": f"The answer is {UNKNOWN}."}
        )
        return SearchEpisode(episode_id, question, UNKNOWN, tuple(messages))
    founder = graph.founder_of[company]
    city = graph.birthplace_of[founder]
    if gives_up:
        # Both failed calls are error segments (never trained); what is trained is stopping after them.
        # A demo model that cannot yet copy a title otherwise retried until its turns came apart.
        for _ in range(2):
            step("open", "Open the company page.", error=True, title=company.replace(" Corp", ""))
        messages.append({"role": "assistant", "reasoning_content": "The page cannot be opened.",
                         "content": f"The answer is {UNKNOWN}."})
        return SearchEpisode(episode_id, question, city, tuple(messages))
    if with_error:
        step("open", "Open the company page.", error=True, title=company.replace(" Corp", ""))
    step("open", "Open the company page.", title=company)
    step("open", "Open the founder's page.", title=founder)
    messages.append(
        {"role": "assistant", "reasoning_content": f"{founder} was born in {city}.", "content": f"The answer is {city}."}
    )
    return SearchEpisode(episode_id, question, city, tuple(messages))


def generate(count: int, seed: int, error_rate: float = 0.25, unknown_rate: float = 0.15,
             give_up_rate: float = 0.1) -> list[SearchEpisode]:
    """`count` episodes; `unknown_rate` of them ask about a company the graph does not have, and
    `give_up_rate` of the answerable ones stop after two failed opens."""
    graph = build_graph(seed)
    rng = random.Random(f"search:{seed}")
    companies = sorted(graph.founder_of)
    # Every company once before any repeats.
    order = [company for _ in range(-(-count // len(companies))) for company in rng.sample(companies, len(companies))]
    episodes = []
    for i, company in enumerate(order[:count]):
        if rng.random() < unknown_rate:
            company = unknown_company(graph, rng)
        with_error, gives_up = rng.random() < error_rate, rng.random() < give_up_rate
        episodes.append(make_episode(graph, company, rng, f"search-{seed}-{i}", with_error, gives_up))
    return episodes
