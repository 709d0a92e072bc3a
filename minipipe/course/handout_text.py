"""The handout's words in English, German (Sie, for decision makers) and Dutch (je, as Dutch business writing in
tech does), with {placeholders} for the figures minipipe.course.handout computes. Terms as i18n/terms.tsv.
"""

from __future__ import annotations

TEXT: dict[str, dict[str, object]] = {
    "en": {
        "title": "Pipeline parallelism for decision makers",
        "subtitle": "One page, every figure computed by the minipipe course's planner and serving model "
        "(decide/ in the course). Prices are examples; put in your own.",
        "fit_head": "1 · Splitting makes large models run at all",
        "model": "model",
        "to_train": "H100s to train",
        "to_serve": "H100s to serve",
        "fit_text": "The fewest 80 GB GPUs each model needs. Above one, the model runs only when it is split over GPUs "
        "— pipeline parallelism (whole layers per GPU) is one way, tensor parallelism (each layer cut across GPUs) "
        "another.",
        "train_head": "2 · What training costs: the layout is a budget line",
        "train_text": "{model_70b} on 1,024 A100s, 2 trillion tokens, ${price_a100:.2f} per GPU-hour (an example): "
        "the same run, split in different ways.",
        "train_big": "best ${best_money:.1f} M in {best_days:.0f} days · slowest that fits ${slowest_money:.1f} M "
        "in {slowest_days:.0f} days ({layout_factor:.1f}×)",
        "train_trust": "Held to Meta's published GPU-hours, the planner's best is {published_share:.0%} of them: "
        "real runs lose time to restarts and evaluation. Budget above it.",
        "serve_head": "3 · What serving costs, and what a user waits",
        "serve_text": "{model_70b} on one server of 8 H100s. A pipeline serves more users; it does not answer "
        "any one of them sooner.",
        "serve_big": "per token: pipeline of 2 → 8 stages {pipe2_ms:.0f} → {pipe8_ms:.0f} ms · "
        "tensor parallel on 8: {tensor8_ms:.0f} ms",
        "serve_cost": "8 pipeline stages give {throughput_factor:.1f}× the tokens per second of 2. Cost per million "
        "tokens: ${cost_batch1:.0f} serving one conversation at a time, ${cost_batch64:.2f} serving 64 at once "
        "({batch_factor:.0f}× cheaper). Latency is bought with tensor parallelism or a smaller model; cost with "
        "larger batches.",
        "ask_head": "What to ask your engineers",
        "questions": [
            "Does the model fit on one GPU? If not, how many at least, to train and to serve it?",
            "Which layout (tensor × pipeline × data) do you plan, and what are its GPU-hours against the best?",
            "What do we pay per GPU-hour: on demand, reserved or spot?",
            "Serving: what does a user wait per token, what does a million tokens cost, at what batch size?",
            "Do we need lower latency or lower cost? They pull in opposite directions.",
        ],
        "claims_head": "4 · The four business claims, checked",
        "claim": "claim",
        "figure": "computed",
        "verdict": "verdict",
        "claims": [
            (
                "Scalability: larger models become usable",
                "{model_405b}: ≥ {train_405b} H100s to train, {serve_405b} to serve",
                "holds",
            ),
            (
                "Cost: better hardware use lowers costs",
                "layouts of one run {layout_factor:.1f}× apart; batching {batch_factor:.0f}× cheaper",
                "holds for a good layout, not for splitting as such",
            ),
            (
                "Response speed: parallelisation lowers latency",
                "pipeline {pipe2_ms:.0f} → {pipe8_ms:.0f} ms per token; tensor parallel {tensor8_ms:.0f} ms",
                "false for a pipeline; true for tensor parallelism",
            ),
            (
                "Availability: large models for more users",
                "Llama 2 70B on {serve_70b} H100s; {throughput_factor:.1f}× the tokens with 8 stages",
                "holds",
            ),
        ],
        "foot": "Sources: model shapes and GPU datasheets as in minipipe/planner/presets.py; efficiencies fitted on "
        "published runs (minipipe/planner/published.py); Llama 2 tokens and GPU-hours: Touvron et al. 2023, Tables 1 "
        "and 2; price: Lambda's public price page, read 2026-09-20 (prices vary several-fold between providers). "
        "Serving: 2,048 tokens of context per conversation, bf16 weights.",
    },
    "de": {
        "title": "Pipeline Parallelism für Entscheider",
        "subtitle": "Eine Seite, jede Zahl berechnet vom Planner und vom Serving-Modell des minipipe-Kurses "
        "(decide/ im Kurs). Preise sind Beispiele – setzen Sie Ihre eigenen ein.",
        "fit_head": "1 · Erst die Aufteilung lässt große Modelle überhaupt laufen",
        "model": "Modell",
        "to_train": "H100 fürs Training",
        "to_serve": "H100 für den Betrieb",
        "fit_text": "Die Mindestzahl an 80-GB-GPUs je Modell. Ab zwei läuft das Modell nur, wenn es auf mehrere GPUs "
        "verteilt wird – Pipeline Parallelism (ganze Schichten je GPU) ist ein Weg, Tensor Parallelism (jede "
        "Schicht über mehrere GPUs geschnitten) ein anderer.",
        "train_head": "2 · Was Training kostet: das Layout ist ein Budgetposten",
        "train_text": "{model_70b} auf 1.024 A100, 2 Billionen Tokens, {price_a100:.2f} $ pro GPU-Stunde "
        "(ein Beispiel): derselbe Lauf, verschieden aufgeteilt.",
        "train_big": "bestes Layout {best_money:.1f} Mio. $ in {best_days:.0f} Tagen · langsamstes, das passt, "
        "{slowest_money:.1f} Mio. $ in {slowest_days:.0f} Tagen ({layout_factor:.1f}×)",
        "train_trust": "Gemessen an Metas veröffentlichten GPU-Stunden liegt das beste Layout des Planners bei "
        "{published_share:.0%} davon: echte Läufe verlieren Zeit durch Neustarts und Evaluierungen. Planen Sie "
        "darüber.",
        "serve_head": "3 · Was der Betrieb kostet und wie lange Nutzer warten",
        "serve_text": "{model_70b} auf einem Server mit 8 H100. Eine Pipeline bedient mehr Nutzer, beantwortet "
        "aber keine einzelne Anfrage schneller.",
        "serve_big": "je Token: Pipeline mit 2 → 8 Stages {pipe2_ms:.0f} → {pipe8_ms:.0f} ms · "
        "Tensor Parallelism auf 8: {tensor8_ms:.0f} ms",
        "serve_cost": "8 Pipeline-Stages liefern {throughput_factor:.1f}× so viele Tokens pro Sekunde wie 2. Kosten "
        "je Million Tokens: {cost_batch1:.0f} $ bei einem Gespräch zur Zeit, {cost_batch64:.2f} $ bei 64 "
        "gleichzeitig ({batch_factor:.0f}× günstiger). Geringere Latenz kaufen Sie mit Tensor Parallelism oder "
        "einem kleineren Modell, geringere Kosten mit größeren Batches.",
        "ask_head": "Was Sie Ihr Technikteam fragen sollten",
        "questions": [
            "Passt das Modell auf eine GPU? Wenn nicht: wie viele mindestens, für Training und Betrieb?",
            "Welches Layout (Tensor × Pipeline × Data) ist geplant, und wie viele GPU-Stunden kostet es im "
            "Vergleich zum besten?",
            "Was zahlen wir pro GPU-Stunde: on demand, reserviert oder Spot?",
            "Betrieb: Wie lange wartet ein Nutzer je Token, was kostet eine Million Tokens, bei welcher Batch-Größe?",
            "Brauchen wir geringere Latenz oder geringere Kosten? Beides zieht in entgegengesetzte Richtungen.",
        ],
        "claims_head": "4 · Die vier Geschäftsversprechen, nachgerechnet",
        "claim": "Versprechen",
        "figure": "berechnet",
        "verdict": "Urteil",
        "claims": [
            (
                "Skalierbarkeit: größere Modelle werden nutzbar",
                "{model_405b}: ≥ {train_405b} H100 fürs Training, {serve_405b} für den Betrieb",
                "stimmt",
            ),
            (
                "Kosteneffizienz: bessere Hardwarenutzung senkt Kosten",
                "Layouts desselben Laufs {layout_factor:.1f}× auseinander; Batching {batch_factor:.0f}× günstiger",
                "stimmt für ein gutes Layout, nicht für das Aufteilen an sich",
            ),
            (
                "Antwortgeschwindigkeit: Parallelisierung senkt die Latenz",
                "Pipeline {pipe2_ms:.0f} → {pipe8_ms:.0f} ms je Token; Tensor Parallelism {tensor8_ms:.0f} ms",
                "falsch für eine Pipeline; richtig für Tensor Parallelism",
            ),
            (
                "Verfügbarkeit: große Modelle für mehr Nutzer",
                "Llama 2 70B auf {serve_70b} H100; {throughput_factor:.1f}× so viele Tokens mit 8 Stages",
                "stimmt",
            ),
        ],
        "foot": "Quellen: Modellformen und GPU-Datenblätter wie in minipipe/planner/presets.py; Effizienzen an "
        "veröffentlichten Läufen angepasst (minipipe/planner/published.py); Tokens und GPU-Stunden von Llama 2: "
        "Touvron et al. 2023, Tabellen 1 und 2; Preis: öffentliche Preisseite von Lambda, abgerufen am 20.09.2026 "
        "(Preise unterscheiden sich zwischen Anbietern um ein Mehrfaches). Betrieb: 2.048 Tokens Kontext je "
        "Gespräch, Gewichte in bf16.",
    },
    "nl": {
        "title": "Pipeline parallelism voor beslissers",
        "subtitle": "Eén pagina, elk getal berekend door de planner en het serving-model van de minipipe-cursus "
        "(decide/ in de cursus). Prijzen zijn voorbeelden; vul je eigen prijs in.",
        "fit_head": "1 · Pas door op te splitsen draaien grote modellen überhaupt",
        "model": "model",
        "to_train": "H100's om te trainen",
        "to_serve": "H100's om te serveren",
        "fit_text": "Het minimale aantal GPU's van 80 GB per model. Vanaf twee draait het model alleen als je het over "
        "GPU's verdeelt – pipeline parallelism (hele lagen per GPU) is één manier, tensor parallelism (elke laag "
        "over GPU's gesneden) een andere.",
        "train_head": "2 · Wat trainen kost: de layout is een begrotingspost",
        "train_text": "{model_70b} op 1.024 A100's, 2 biljoen tokens, $ {price_a100:.2f} per GPU-uur "
        "(een voorbeeld): dezelfde run, op verschillende manieren verdeeld.",
        "train_big": "beste $ {best_money:.1f} mln in {best_days:.0f} dagen · traagste die past $ {slowest_money:.1f} "
        "mln in {slowest_days:.0f} dagen ({layout_factor:.1f}×)",
        "train_trust": "Naast de GPU-uren die Meta publiceerde komt de beste layout van de planner uit op "
        "{published_share:.0%} daarvan: echte runs verliezen tijd aan herstarts en evaluaties. Begroot erboven.",
        "serve_head": "3 · Wat serveren kost, en hoe lang een gebruiker wacht",
        "serve_text": "{model_70b} op één server met 8 H100's. Een pipeline bedient meer gebruikers, maar "
        "beantwoordt geen enkel verzoek sneller.",
        "serve_big": "per token: pipeline van 2 → 8 stages {pipe2_ms:.0f} → {pipe8_ms:.0f} ms · "
        "tensor parallelism op 8: {tensor8_ms:.0f} ms",
        "serve_cost": "8 pipeline-stages leveren {throughput_factor:.1f}× zoveel tokens per seconde als 2. Kosten per "
        "miljoen tokens: $ {cost_batch1:.0f} bij één gesprek tegelijk, $ {cost_batch64:.2f} bij 64 tegelijk "
        "({batch_factor:.0f}× goedkoper). Lagere latentie koop je met tensor parallelism of een kleiner model, "
        "lagere kosten met grotere batches.",
        "ask_head": "Wat je je engineers moet vragen",
        "questions": [
            "Past het model op één GPU? Zo niet: hoeveel minstens, om te trainen en om te serveren?",
            "Welke layout (tensor × pipeline × data) is gepland, en hoeveel GPU-uren kost die tegenover de beste?",
            "Wat betalen we per GPU-uur: on demand, gereserveerd of spot?",
            "Serveren: hoe lang wacht een gebruiker per token, wat kost een miljoen tokens, bij welke batchgrootte?",
            "Hebben we lagere latentie of lagere kosten nodig? Die twee trekken elk een andere kant op.",
        ],
        "claims_head": "4 · De vier zakelijke beloften, nagerekend",
        "claim": "belofte",
        "figure": "berekend",
        "verdict": "oordeel",
        "claims": [
            (
                "Schaalbaarheid: grotere modellen worden bruikbaar",
                "{model_405b}: ≥ {train_405b} H100's om te trainen, {serve_405b} om te serveren",
                "klopt",
            ),
            (
                "Kosten: beter hardwaregebruik verlaagt de kosten",
                "layouts van één run {layout_factor:.1f}× uit elkaar; batching {batch_factor:.0f}× goedkoper",
                "klopt voor een goede layout, niet voor opsplitsen op zich",
            ),
            (
                "Reactiesnelheid: parallellisatie verlaagt de latentie",
                "pipeline {pipe2_ms:.0f} → {pipe8_ms:.0f} ms per token; tensor parallelism {tensor8_ms:.0f} ms",
                "onjuist voor een pipeline; juist voor tensor parallelism",
            ),
            (
                "Beschikbaarheid: grote modellen voor meer gebruikers",
                "Llama 2 70B op {serve_70b} H100's; {throughput_factor:.1f}× zoveel tokens met 8 stages",
                "klopt",
            ),
        ],
        "foot": "Bronnen: modelvormen en GPU-datasheets zoals in minipipe/planner/presets.py; efficiënties gefit op "
        "gepubliceerde runs (minipipe/planner/published.py); tokens en GPU-uren van Llama 2: Touvron et al. 2023, "
        "tabellen 1 en 2; prijs: de openbare prijspagina van Lambda, gelezen op 20-09-2026 (prijzen verschillen "
        "per aanbieder een veelvoud). Serveren: 2.048 tokens context per gesprek, gewichten in bf16.",
    },
}
