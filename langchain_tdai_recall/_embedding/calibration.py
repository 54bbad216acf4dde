"""The calibration of the bundled embedder's vectors: its sentences, constants and recipe.

`embeddings.DefaultEmbeddings` post-processes every raw vector with a fixed map (subtract a mean
vector, remove a "language" direction, L2-normalise; the module docstring of `embeddings` says
why). This module holds what that map is made of: the calibration sentences written for this
package (English, their Chinese translations, and mixed ones), the constants computed from them
for each model (float16, base64), the map itself (`Calibration`), and `compute_calibration`, which
reproduces the constants from a raw model (a test checks that with `TDAI_CHECK_CALIBRATION=1`).
Changing any of it requires bumping `embeddings.CALIBRATION_VERSION`.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Final, Protocol

import numpy as np
import numpy.typing as npt

from langchain_tdai_recall.errors import EmbeddingError

__all__ = [
    "Calibration",
    "FloatArray",
    "RawModel",
    "compute_calibration",
    "load_calibration",
    "normalise",
]

FloatArray = npt.NDArray[np.float32]


class RawModel(Protocol):
    """A loaded model that returns raw (uncalibrated) vectors."""

    def embed(self, texts: list[str], *, is_query: bool) -> FloatArray:
        """Raw vectors, one row per text."""


class _Spec(Protocol):
    """What `load_calibration` needs of a model's spec (`embeddings._ModelSpec`)."""

    @property
    def name(self) -> str: ...

    @property
    def dimensions(self) -> int: ...


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
# Regenerate with `compute_calibration(model)` and bump CALIBRATION_VERSION when they change.
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
# Calibration
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Calibration:
    mean: FloatArray
    direction: FloatArray

    def apply(self, raw: FloatArray) -> FloatArray:
        centred = raw - self.mean
        centred -= np.outer(centred @ self.direction, self.direction)
        return normalise(centred)


def normalise(matrix: FloatArray) -> FloatArray:
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


def load_calibration(spec: _Spec) -> Calibration:
    mean_b64, direction_b64 = _CALIBRATION_B64[spec.name]
    direction = _decode_vector(direction_b64, spec.dimensions)
    direction /= float(np.linalg.norm(direction))
    return Calibration(mean=_decode_vector(mean_b64, spec.dimensions), direction=direction)


def compute_calibration(backend: RawModel) -> tuple[FloatArray, FloatArray]:
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
