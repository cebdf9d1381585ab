"""Embedded data of the `chat` suite: open questions and human-written anchor replies.

Each subject's anchor is the reply a careful person would write: what the thing is, why it matters,
and one practical point, in plain words. General RL grades against these anchors (SPEC.md, "General
RL: hybrid rewards with human anchors").
"""

from __future__ import annotations

QUESTION_TEMPLATES = (
    "Can you tell me about {subject}?",
    "What should a beginner know about {subject}?",
    "I keep hearing about {subject}. What is it, in plain words?",
    "Give me a quick overview of {subject}.",
    "Could you explain {subject} to someone new to it?",
)

ANCHORS = {
    "sourdough starters": (
        "A sourdough starter is a mix of flour and water that wild yeast and bacteria have colonised, "
        "and it is what makes sourdough rise and taste tangy. You keep it alive by discarding part of "
        "it and feeding it fresh flour and water, usually once a day at room temperature. If it doubles "
        "within a few hours of a feed, it is ready to bake with."
    ),
    "compound interest": (
        "Compound interest means you earn interest on your earlier interest, not just on the money you "
        "put in. Over short periods the difference is small, but over decades it makes savings grow much "
        "faster than simple interest would. The practical lesson is to start saving early, because time "
        "does most of the work."
    ),
    "jet lag": (
        "Jet lag is the tiredness and poor sleep you get when your body clock is out of step with the "
        "time zone you are in. It is usually worse flying east than west, and it fades by roughly a day "
        "per time zone crossed. Getting daylight in the morning at your destination is the single most "
        "useful thing you can do to reset faster."
    ),
    "composting at home": (
        "Home composting turns kitchen scraps and garden waste into soil-like material that feeds "
        "plants. A good heap mixes wet 'greens' such as vegetable peelings with dry 'browns' such as "
        "cardboard or dead leaves. Keep it about as damp as a wrung-out sponge and turn it now and then "
        "so air can reach the middle."
    ),
    "the Pomodoro technique": (
        "The Pomodoro technique is a way of working in focused blocks, traditionally 25 minutes, each "
        "followed by a short break. The timer makes it easier to start and to ignore distractions, "
        "because the next break is never far away. After four blocks you take a longer rest of 15 to 30 "
        "minutes."
    ),
    "photosynthesis": (
        "Photosynthesis is how plants, algae and some bacteria turn light into chemical energy. Using "
        "sunlight, they combine carbon dioxide from the air with water to make sugar, and release oxygen "
        "as a by-product. Almost all the oxygen we breathe and the food we eat traces back to it."
    ),
    "touch typing": (
        "Touch typing means typing without looking at the keyboard, with each finger responsible for a "
        "fixed set of keys. It feels slow at first, but once the positions are in muscle memory most "
        "people type faster and with fewer errors. Ten or fifteen minutes of practice a day is enough "
        "to get there in a few weeks."
    ),
    "watering houseplants": (
        "Most houseplants die from too much water rather than too little, because soggy soil rots the "
        "roots. A simple rule is to water thoroughly only when the top few centimetres of soil feel dry, "
        "and to make sure the pot can drain. Plants need less water in winter, when they grow slowly."
    ),
    "password managers": (
        "A password manager is an app that creates and stores a strong, different password for every "
        "site, so you only have to remember one master password. That matters because reusing a "
        "password lets one leak unlock many accounts. Pick a well-known manager and protect it with a "
        "long passphrase and two-factor authentication."
    ),
    "bicycle maintenance": (
        "Basic bicycle maintenance keeps a bike safe and pleasant to ride. The three habits that matter "
        "most are keeping the tyres at the pressure printed on their sidewall, cleaning and oiling the "
        "chain every few weeks, and checking that the brakes grip firmly. Those take ten minutes and "
        "prevent most breakdowns."
    ),
    "ocean tides": (
        "Tides are the regular rise and fall of the sea, caused mainly by the Moon's gravity pulling on "
        "the oceans, with help from the Sun. Most coasts get two high and two low tides a day, about 50 "
        "minutes later each day. If you walk on a beach or sail, check a local tide table before you go."
    ),
    "black holes": (
        "A black hole is a region of space where gravity is so strong that nothing, not even light, can "
        "escape once it crosses the edge called the event horizon. Most form when a very massive star "
        "collapses at the end of its life. We detect them by their effect on nearby stars and gas, and "
        "since 2015 by the gravitational waves they make when they merge."
    ),
    "learning a second language": (
        "Learning a second language goes best with a little practice every day rather than long, rare "
        "sessions. Listening and speaking early, even badly, builds confidence faster than perfecting "
        "grammar first. Spaced-repetition flashcards help vocabulary stick, and a conversation partner "
        "keeps you motivated."
    ),
    "index funds": (
        "An index fund is an investment fund that simply buys everything in a market index, such as the "
        "500 large companies in the S&P 500. Because nobody is paid to pick stocks, fees are low, and "
        "over long periods index funds beat most actively managed funds. They suit people who want to "
        "invest steadily without watching the market."
    ),
    "sleep hygiene": (
        "Sleep hygiene is the set of habits that make good sleep more likely. The most effective ones "
        "are keeping the same wake-up time every day, getting daylight in the morning, and avoiding "
        "caffeine after midday. A cool, dark bedroom and putting screens away before bed help too."
    ),
    "version control with git": (
        "Git is a version control system: it records snapshots of your project so you can see what "
        "changed, go back to an earlier state, and work on several ideas in parallel branches. Teams use "
        "it to combine their changes safely. Commit small, related changes with a clear message, and "
        "you will thank yourself later."
    ),
}

# Curt non-answers: the "too short" rejected replies of preference pairs and judge examples.
CURT_REPLIES = (
    "It depends.",
    "Look it up.",
    "That's a big topic.",
    "Not sure, really.",
)

# Polite but useless replies: the "dismissive" rejected replies.
DISMISSIVE_REPLIES = (
    "I'd rather not get into that right now.",
    "There is a lot written about this online; you can find it there.",
    "That's not something I can help with.",
)
