"""English words for written shorthand: abbreviations, titles, units, currencies, months, symbols, acronyms.

Keys are lower case unless case matters (units: "m" is metres, "M" is not a unit; acronyms are upper case).
"""

from __future__ import annotations

__all__ = ["ABBREVIATIONS", "CODES", "CURRENCY", "DAYS", "JOINED_ONLY", "MONTHS", "PLACES", "SCALE_WORDS", "SYMBOLS", "TITLES",
           "UNITS", "WORD_ACRONYMS", "YEAR_CUES"]

# Said before a name. Where the same letters also name a kind of road, PLACES holds the other reading and
# the reader chooses by the words around it.
TITLES = {
    "dr.": "doctor", "mr.": "mister", "mrs.": "missus", "ms.": "miz", "prof.": "professor", "st.": "saint",
    "mt.": "mount", "gen.": "general", "capt.": "captain", "lt.": "lieutenant", "sgt.": "sergeant",
    "rev.": "reverend", "hon.": "honorable", "gov.": "governor", "sen.": "senator", "rep.": "representative",
    "pres.": "president", "ft.": "fort",
}
PLACES = {"dr.": "drive", "st.": "street", "ft.": "feet"}
ABBREVIATIONS = {
    "jr.": "junior", "sr.": "senior", "ave.": "avenue", "blvd.": "boulevard", "rd.": "road", "ln.": "lane",
    "ct.": "court", "hwy.": "highway", "apt.": "apartment", "ste.": "suite", "vs.": "versus", "etc.": "et cetera",
    "e.g.": "for example", "i.e.": "that is", "approx.": "approximately", "dept.": "department", "inc.":
    "incorporated", "ltd.": "limited", "corp.": "corporation", "co.": "company", "est.": "established",
    "fig.": "figure", "vol.": "volume", "ch.": "chapter", "no.": "number", "nos.": "numbers", "tel.":
    "telephone", "misc.": "miscellaneous", "max.": "maximum", "min.": "minimum", "avg.": "average",
    "w/": "with", "w/o": "without", "a.m.": "a m", "p.m.": "p m", "am": "a m", "pm": "p m", "u.s.": "U S",
    "u.k.": "U K", "u.s.a.": "U S A", "ok": "okay", "mph": "miles per hour",
}
MONTHS = {
    "jan": "January", "feb": "February", "mar": "March", "apr": "April", "may": "May", "jun": "June",
    "jul": "July", "aug": "August", "sep": "September", "sept": "September", "oct": "October",
    "nov": "November", "dec": "December", **{m.lower(): m for m in (
        "January", "February", "March", "April", "June", "July", "August", "September", "October", "November",
        "December")},
}
DAYS = {"mon": "Monday", "tue": "Tuesday", "tues": "Tuesday", "wed": "Wednesday", "thu": "Thursday",
        "thur": "Thursday", "thurs": "Thursday", "fri": "Friday", "sat": "Saturday", "sun": "Sunday"}
# Symbols before an amount: (one, many, one hundredth, hundredths).
CURRENCY = {
    "$": ("dollar", "dollars", "cent", "cents"), "£": ("pound", "pounds", "penny", "pence"),
    "€": ("euro", "euros", "cent", "cents"), "¥": ("yen", "yen", "sen", "sen"),
    "₹": ("rupee", "rupees", "paisa", "paise"), "₩": ("won", "won", "jeon", "jeon"),
}
# Codes before or after an amount ("USD 5", "5 EUR").
CODES = {
    "USD": ("US dollar", "US dollars", "cent", "cents"), "EUR": CURRENCY["€"], "GBP": CURRENCY["£"],
    "JPY": CURRENCY["¥"], "INR": CURRENCY["₹"], "CAD": ("Canadian dollar", "Canadian dollars", "cent", "cents"),
    "AUD": ("Australian dollar", "Australian dollars", "cent", "cents"),
    "CHF": ("Swiss franc", "Swiss francs", "centime", "centimes"), "CNY": ("yuan", "yuan", "fen", "fen"),
    "BTC": ("bitcoin", "bitcoin", "satoshi", "satoshis"),
}
SCALE_WORDS = frozenset({"thousand", "million", "billion", "trillion"})
# After a number (or joined to one): (singular, plural). Case matters: "M" is no unit, "mm" is.
UNITS = {
    "mm": ("millimeter", "millimeters"), "cm": ("centimeter", "centimeters"), "m": ("meter", "meters"),
    "km": ("kilometer", "kilometers"), "in": ("inch", "inches"), "ft": ("foot", "feet"), "yd": ("yard", "yards"),
    "mi": ("mile", "miles"), "mg": ("milligram", "milligrams"), "g": ("gram", "grams"), "kg": ("kilogram",
    "kilograms"), "lb": ("pound", "pounds"), "lbs": ("pound", "pounds"), "oz": ("ounce", "ounces"),
    "ml": ("milliliter", "milliliters"), "mL": ("milliliter", "milliliters"), "l": ("liter", "liters"),
    "L": ("liter", "liters"), "gal": ("gallon", "gallons"), "km/h": ("kilometer per hour", "kilometers per hour"),
    "kph": ("kilometer per hour", "kilometers per hour"), "mph": ("mile per hour", "miles per hour"),
    "m/s": ("meter per second", "meters per second"), "ms": ("millisecond", "milliseconds"),
    "s": ("second", "seconds"), "sec": ("second", "seconds"), "min": ("minute", "minutes"),
    "h": ("hour", "hours"), "hr": ("hour", "hours"), "hrs": ("hour", "hours"), "Hz": ("hertz", "hertz"),
    "kHz": ("kilohertz", "kilohertz"), "MHz": ("megahertz", "megahertz"), "GHz": ("gigahertz", "gigahertz"),
    "W": ("watt", "watts"), "kW": ("kilowatt", "kilowatts"), "kWh": ("kilowatt hour", "kilowatt hours"),
    "V": ("volt", "volts"), "mAh": ("milliamp hour", "milliamp hours"), "B": ("byte", "bytes"),
    "KB": ("kilobyte", "kilobytes"), "kB": ("kilobyte", "kilobytes"), "MB": ("megabyte", "megabytes"),
    "GB": ("gigabyte", "gigabytes"), "TB": ("terabyte", "terabytes"), "Mbps": ("megabit per second",
    "megabits per second"), "Gbps": ("gigabit per second", "gigabits per second"), "°C": ("degree Celsius",
    "degrees Celsius"), "°F": ("degree Fahrenheit", "degrees Fahrenheit"), "°": ("degree", "degrees"),
    "C": ("degree Celsius", "degrees Celsius"), "F": ("degree Fahrenheit", "degrees Fahrenheit"),
    "sq": ("square", "square"), "x": ("times", "times"),
}
# Units that are also everyday words or letters: read as units only when joined to the number ("5s", "5x")
# or, spaced, after a number that cannot be anything else's ("5 in the box" stays "in").
JOINED_ONLY = frozenset({"in", "s", "m", "l", "h", "B", "C", "F", "x", "sq", "min", "V", "W", "g"})
SYMBOLS = {"&": "and", "+": "plus", "=": "equals", "@": "at", "#": "number", "%": "percent", "°": "degrees",
           "/": "slash", "~": "about", "*": "star"}
# Upper-case words read as words, not letter by letter; every other acronym of two to five capitals is spelled.
WORD_ACRONYMS = frozenset(
    "NASA NATO UNESCO UNICEF LASER RADAR SCUBA COVID AIDS GIF JPEG OPEC FIFA NAFTA PIN RAM ROM SIM LAN WAN "
    "ASCII CAPTCHA GIF IKEA LEGO SARS MERS ZIP POTUS FLOTUS OSHA DARPA FEMA NOAA SWAT WASP YAML JSON".split())
# Words after which a four-digit number from 1100 to 2099 is a year.
YEAR_CUES = frozenset(
    "in since by of from until till to around circa before after during year spring summer autumn fall winter "
    "early late mid class".split())
