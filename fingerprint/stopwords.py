"""Stop lists: words that carry grammar rather than content, dropped before shingling.

Both lists are part of the scheme (changing them changes fingerprints: bump
``ALGORITHM_VERSION``). They are matched against casefolded tokens *and* against the
lemma / stem, so each list holds the forms that can occur in either place.

* English: the Snowball English stop list, plus the fragments that the tokeniser leaves of
  contractions ("don't" → "don", "t"; "we'll" → "we", "ll").
* Russian: the Snowball Russian stop list (with ё written е, as canonical text has no ё),
  plus the lemmas of its forms. Most Russian function words are also dropped by their
  pymorphy3 part of speech (see :mod:`neardup.fingerprint.canonical`); the list catches the ones the
  tagger files under content parts of speech (быть, можно, надо, тоже, …).
"""

from __future__ import annotations

ENGLISH: frozenset[str] = frozenset("""
i me my myself we our ours ourselves you your yours yourself yourselves he him his himself
she her hers herself it its itself they them their theirs themselves what which who whom
this that these those am is are was were be been being have has had having do does did
doing would should could ought a an the and but if or because as until while of at by for
with about against between into through during before after above below to from up down in
out on off over under again further then once here there when where why how all any both
each few more most other some such no nor not only own same so than too very
s t d ll m re ve isn aren wasn weren hasn haven hadn doesn don didn won wouldn shan shouldn
can couldn mustn cannot let
""".split())

RUSSIAN: frozenset[str] = frozenset("""
и в во не что он на я с со как а то все она так его но да ты к у же вы за бы по только ее
мне было вот от меня еще нет о из ему теперь когда даже ну вдруг ли если уже или ни быть был
него до вас нибудь опять уж вам ведь там потом себя ничего ей может они тут где есть надо ней
для мы тебя их чем была сам чтоб без будто чего раз тоже себе под будет ж тогда кто этот того
потому этого какой совсем ним здесь этом почти мой тем чтобы нее сейчас были куда зачем
всех никогда можно при наконец об другой хоть после над больше тот через эти нас про всего
них какая много разве эту моя впрочем хорошо свою этой перед иногда лучше чуть том нельзя
такой им более всегда конечно всю между
весь мочь себя свой который это оно
""".split())
