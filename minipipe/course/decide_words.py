"""The words the decision makers' notebooks print (table headers, figure titles, widget labels), in German
(Sie) and Dutch (je): English text -> its translation, {fields} kept. The prose is in the catalogs
(i18n/<lang>/decide/); these are the outputs the code cells make. A text without an entry (a bare number)
prints as it is; tests/course/test_decide_words.py checks that every text a notebook says has one."""

from __future__ import annotations

WORDS: dict[str, dict[str, str]] = {
    "de": {
        " (context {cp})": " (Kontext {cp})",
        "{ms:.1f} ms": "{ms:.1f} ms",
        "{s:.1f} s": "{s:.1f} s",
        "model": "Modell",
        "parameters": "Parameter",
        "{gpu}: train / serve": "{gpu}: Training / Betrieb",
        "{n:,.1f} billion": "{n:,.1f} Mrd.",
        "to train it": "fürs Training",
        "to serve it": "für den Betrieb",
        "one GPU": "eine GPU",
        "The fewest H100 GPUs each published model needs (the planner)": "Mindestzahl an H100-GPUs je "
        "veröffentlichtem Modell (der Planner)",
        "GPUs (log scale)": "GPUs (logarithmisch)",
        "published model": "veröffentlichtes Modell",
        "**The example.** {model} on {count:,} {gpu} GPUs, trained on {tokens:g} trillion tokens ({tokens_source}), "
        "at USD {price:.2f} per GPU-hour ({price_source}).": "**Das Beispiel.** {model} auf {count:,} GPUs vom Typ "
        "{gpu}, trainiert mit {tokens:g} Billionen Tokens ({tokens_source}), zu {price:.2f} USD pro GPU-Stunde "
        "({price_source}).",
        "USD {m:,.1f} million": "{m:,.1f} Mio. USD",
        "USD {x:,.0f}": "{x:,.0f} USD",
        "USD {x:,.2f}": "{x:,.2f} USD",
        "layout (tensor × pipeline × data)": "Layout (Tensor × Pipeline × Data)",
        "days": "Tage",
        "GPU-hours": "GPU-Stunden",
        "cost": "Kosten",
        "share of the GPUs' peak used": "genutzter Anteil der GPU-Spitzenleistung",
        "the planner's best": "das beste des Planners",
        "a middling one": "ein mittelmäßiges",
        "the slowest that fits": "das langsamste, das passt",
        "H100 SXM on demand: USD {low:.2f} to USD {high:.2f} per GPU-hour, {x:.1f}× apart ({source})": "H100 SXM "
        "on demand: {low:.2f} bis {high:.2f} USD pro GPU-Stunde, {x:.1f}× auseinander ({source})",
        "best: {layout}": "bestes: {layout}",
        "middling: {layout}": "mittelmäßiges: {layout}",
        "slowest: {layout}": "langsamstes: {layout}",
        "{d:,.0f} days": "{d:,.0f} Tage",
        "{model}, {count:,} GPUs: the same run, three ways to split it (the planner)": "{model}, {count:,} GPUs: "
        "derselbe Lauf, auf drei Arten aufgeteilt (der Planner)",
        "cost, million USD": "Kosten, Mio. USD",
        "layout": "Layout",
        "the planner's best: {mine:,.0f} GPU-hours; Meta published {hours:,} ({source}): the planner's figure is "
        "{ratio:.0%} of it": "das beste Layout des Planners: {mine:,.0f} GPU-Stunden; Meta veröffentlichte {hours:,} "
        "({source}): die Zahl des Planners liegt bei {ratio:.0%} davon",
        "Llama 2 7B on 256 GPUs: the planner's best {mine:,.0f} GPU-hours, Meta published {hours:,}: {ratio:.0%} of "
        "it": "Llama 2 7B auf 256 GPUs: das beste Layout des Planners {mine:,.0f} GPU-Stunden, Meta veröffentlichte "
        "{hours:,}: {ratio:.0%} davon",
        "{n:,} GPUs: {days:,.0f} days, {money}; {n2:,} GPUs: {days2:,.0f} days, {money2}": "{n:,} GPUs: "
        "{days:,.0f} Tage, {money}; {n2:,} GPUs: {days2:,.0f} Tage, {money2}",
        "GPUs": "GPUs",
        "USD / GPU-hour": "USD / GPU-Stunde",
        "billion tokens": "Mrd. Tokens",
        "**Does not fit:** {why}": "**Passt nicht:** {why}",
        "{model} on one server of 8 H100s: waiting against serving many": "{model} auf einem Server mit 8 H100: "
        "Warten gegen viele bedienen",
        "batch {k}": "Batch {k}",
        "USD {x:.2f} per million tokens": "{x:.2f} USD je Million Tokens",
        "tokens per second, all users together (log)": "Tokens pro Sekunde, alle Nutzer zusammen (logarithmisch)",
        "what one user waits per token, ms": "Wartezeit eines Nutzers je Token, ms",
        "pipeline stages": "Pipeline-Stages",
        "one user waits per token": "Wartezeit eines Nutzers je Token",
        "tokens per second, all users": "Tokens pro Sekunde, alle Nutzer",
        "what lowers the wait": "was das Warten verkürzt",
        "per token": "je Token",
        "a 500-token answer": "eine Antwort aus 500 Tokens",
        "USD per million tokens": "USD je Million Tokens",
        "{name}, batch {k}": "{name}, Batch {k}",
        "batch": "Batch",
        " — **does not fit**: the conversations' context exceeds the GPUs' memory": " – **passt nicht**: Der "
        "Kontext der Gespräche übersteigt den Speicher der GPUs",
        "{model}, {layout}, batch {k}: each user waits **{ms:.1f} ms** per token; **{rate:,.0f}** tokens per second "
        "in all; **USD {cost:,.2f}** per million tokens": "{model}, {layout}, Batch {k}: Jeder Nutzer wartet "
        "**{ms:.1f} ms** je Token; **{rate:,.0f}** Tokens pro Sekunde insgesamt; **{cost:,.2f} USD** je Million "
        "Tokens",
        "{name}: tensor {tp} × pipeline {pp} ({source})": "{name}: Tensor {tp} × Pipeline {pp} ({source})",
    },
    "nl": {
        " (context {cp})": " (context {cp})",
        "{ms:.1f} ms": "{ms:.1f} ms",
        "{s:.1f} s": "{s:.1f} s",
        "model": "model",
        "parameters": "parameters",
        "{gpu}: train / serve": "{gpu}: trainen / serveren",
        "{n:,.1f} billion": "{n:,.1f} mld.",
        "to train it": "om te trainen",
        "to serve it": "om te serveren",
        "one GPU": "één GPU",
        "The fewest H100 GPUs each published model needs (the planner)": "Het minimale aantal H100-GPU's per "
        "gepubliceerd model (de planner)",
        "GPUs (log scale)": "GPU's (logaritmisch)",
        "published model": "gepubliceerd model",
        "**The example.** {model} on {count:,} {gpu} GPUs, trained on {tokens:g} trillion tokens ({tokens_source}), "
        "at USD {price:.2f} per GPU-hour ({price_source}).": "**Het voorbeeld.** {model} op {count:,} GPU's van het "
        "type {gpu}, getraind op {tokens:g} biljoen tokens ({tokens_source}), tegen USD {price:.2f} per GPU-uur "
        "({price_source}).",
        "USD {m:,.1f} million": "USD {m:,.1f} mln",
        "USD {x:,.0f}": "USD {x:,.0f}",
        "USD {x:,.2f}": "USD {x:,.2f}",
        "layout (tensor × pipeline × data)": "layout (tensor × pipeline × data)",
        "days": "dagen",
        "GPU-hours": "GPU-uren",
        "cost": "kosten",
        "share of the GPUs' peak used": "benut deel van de piekprestatie van de GPU's",
        "the planner's best": "de beste van de planner",
        "a middling one": "een middelmatige",
        "the slowest that fits": "de traagste die past",
        "H100 SXM on demand: USD {low:.2f} to USD {high:.2f} per GPU-hour, {x:.1f}× apart ({source})": "H100 SXM "
        "on demand: USD {low:.2f} tot USD {high:.2f} per GPU-uur, {x:.1f}× uit elkaar ({source})",
        "best: {layout}": "beste: {layout}",
        "middling: {layout}": "middelmatig: {layout}",
        "slowest: {layout}": "traagste: {layout}",
        "{d:,.0f} days": "{d:,.0f} dagen",
        "{model}, {count:,} GPUs: the same run, three ways to split it (the planner)": "{model}, {count:,} GPU's: "
        "dezelfde run, op drie manieren verdeeld (de planner)",
        "cost, million USD": "kosten, mln USD",
        "layout": "layout",
        "the planner's best: {mine:,.0f} GPU-hours; Meta published {hours:,} ({source}): the planner's figure is "
        "{ratio:.0%} of it": "de beste layout van de planner: {mine:,.0f} GPU-uren; Meta publiceerde {hours:,} "
        "({source}): het getal van de planner is {ratio:.0%} daarvan",
        "Llama 2 7B on 256 GPUs: the planner's best {mine:,.0f} GPU-hours, Meta published {hours:,}: {ratio:.0%} of "
        "it": "Llama 2 7B op 256 GPU's: de beste layout van de planner {mine:,.0f} GPU-uren, Meta publiceerde "
        "{hours:,}: {ratio:.0%} daarvan",
        "{n:,} GPUs: {days:,.0f} days, {money}; {n2:,} GPUs: {days2:,.0f} days, {money2}": "{n:,} GPU's: "
        "{days:,.0f} dagen, {money}; {n2:,} GPU's: {days2:,.0f} dagen, {money2}",
        "GPUs": "GPU's",
        "USD / GPU-hour": "USD / GPU-uur",
        "billion tokens": "mld. tokens",
        "**Does not fit:** {why}": "**Past niet:** {why}",
        "{model} on one server of 8 H100s: waiting against serving many": "{model} op één server met 8 H100's: "
        "wachten tegenover velen bedienen",
        "batch {k}": "batch {k}",
        "USD {x:.2f} per million tokens": "USD {x:.2f} per miljoen tokens",
        "tokens per second, all users together (log)": "tokens per seconde, alle gebruikers samen (logaritmisch)",
        "what one user waits per token, ms": "wachttijd van één gebruiker per token, ms",
        "pipeline stages": "pipeline-stages",
        "one user waits per token": "wachttijd van één gebruiker per token",
        "tokens per second, all users": "tokens per seconde, alle gebruikers",
        "what lowers the wait": "wat het wachten verkort",
        "per token": "per token",
        "a 500-token answer": "een antwoord van 500 tokens",
        "USD per million tokens": "USD per miljoen tokens",
        "{name}, batch {k}": "{name}, batch {k}",
        "batch": "batch",
        " — **does not fit**: the conversations' context exceeds the GPUs' memory": " – **past niet**: de context "
        "van de gesprekken is groter dan het geheugen van de GPU's",
        "{model}, {layout}, batch {k}: each user waits **{ms:.1f} ms** per token; **{rate:,.0f}** tokens per second "
        "in all; **USD {cost:,.2f}** per million tokens": "{model}, {layout}, batch {k}: elke gebruiker wacht "
        "**{ms:.1f} ms** per token; **{rate:,.0f}** tokens per seconde in totaal; **USD {cost:,.2f}** per miljoen "
        "tokens",
        "{name}: tensor {tp} × pipeline {pp} ({source})": "{name}: tensor {tp} × pipeline {pp} ({source})",
    },
}
