"""Written English -> what it says: the table the front end is held to (tests/text/test_english.py); beside the other shared test helpers."""

CASES: list[tuple[str, str]] = [
    # cardinals and decimals
    ("0", "zero"), ("7", "seven"), ("42", "forty two"), ("120", "one hundred twenty"),
    ("1,000", "one thousand"), ("1.000", "one point zero zero zero"), ("1,234,567", "one million two hundred thirty four thousand five hundred sixty seven"),
    ("3.14", "three point one four"), ("0.5", "zero point five"), (".5", "point five"),
    ("-5", "minus five"), ("+5", "plus five"), ("-2.5", "minus two point five"), ("007", "oh oh seven"),
    ("10+ years", "ten plus years"), ("2.5M", "two point five million"), ("5k", "five thousand"),
    ("3B", "three billion"), ("1000000", "one million"),
    # ordinals
    ("1st", "first"), ("2nd", "second"), ("3rd", "third"), ("4th", "fourth"), ("21st", "twenty first"),
    ("103rd", "one hundred third"), ("the 11th hour", "the eleventh hour"),
    # money
    ("$5", "five dollars"), ("$1", "one dollar"), ("$5.20", "five dollars and twenty cents"),
    ("$0.99", "ninety nine cents"), ("$1.01", "one dollar and one cent"), ("$5.00", "five dollars"),
    ("$1,000,000", "one million dollars"), ("$2.5M", "two point five million dollars"),
    ("$5 million", "five million dollars"), ("-$5", "minus five dollars"), ("€3.50", "three euros and fifty cents"),
    ("£2.50", "two pounds and fifty pence"), ("£1", "one pound"), ("¥100", "one hundred yen"),
    ("USD 5", "five US dollars"), ("10 EUR", "ten euros"), ("EUR 10.50", "ten euros and fifty cents"),
    ("It costs $3.50.", "It costs three dollars and fifty cents."), ("$5.5", "five dollars and fifty cents"),
    ("$.99", "ninety nine cents"),
    # percentages
    ("25%", "twenty five percent"), ("2.5%", "two point five percent"), ("-3%", "minus three percent"),
    ("100%", "one hundred percent"),
    # fractions
    ("1/2", "one half"), ("3/4", "three quarters"), ("2/3", "two thirds"), ("1/3", "one third"),
    ("5/8", "five eighths"), ("1 1/2 cups", "one and a half cups"), ("2 3/4", "two and three quarters"),
    ("1½", "one and a half"), ("24/7", "twenty four seven"),
    # dates (stated rules: y-m-d; "/" month first unless impossible; "." day first)
    ("2026-12-02", "December second, twenty twenty six"), ("12/02/2026", "December second, twenty twenty six"),
    ("25/12/2026", "December twenty fifth, twenty twenty six"), ("02.12.2026", "December second, twenty twenty six"),
    ("1/5/2026", "January fifth, twenty twenty six"), ("13/1/2026", "January thirteenth, twenty twenty six"),
    ("May 5, 2026", "May fifth, twenty twenty six"), ("Dec. 2, 2026", "December second, twenty twenty six"),
    ("5 May 2026", "the fifth of May twenty twenty six"), ("Jan 1st", "January first"),
    ("due on 12/25", "due on December twenty fifth"), ("12/25/99", "December twenty fifth, ninety nine"),
    ("1/2/05", "January second, oh five"),
    # times
    ("10:30", "ten thirty"), ("10:05", "ten oh five"), ("9:00", "nine o'clock"), ("14:00", "fourteen hundred"),
    ("14:30", "fourteen thirty"), ("10:30am", "ten thirty a m"), ("10:30 PM", "ten thirty p m"),
    ("7am", "seven a m"), ("9 am.", "nine a m."), ("10:00 am", "ten a m"), ("at 5 p.m. today", "at five p m today"),
    ("3pm", "three p m"), ("10:30:15", "ten thirty and fifteen seconds"), ("3:1", "three to one"),
    ("I am here", "I am here"),
    # years
    ("1999", "nineteen ninety nine"), ("in 2005", "in two thousand five"), ("since 1905", "since nineteen oh five"),
    ("in 2010", "in twenty ten"), ("1500 people", "one thousand five hundred people"),
    ("It was 1984.", "It was nineteen eighty four."), ("2000 dollars", "two thousand dollars"),
    ("the 1990s", "the nineteen nineties"), ("the 80s", "the eighties"), ("'90s", "nineties"),
    ("1066 AD", "ten sixty six A D"),
    # ranges
    ("1-5", "one to five"), ("10-20", "ten to twenty"), ("pages 10–20", "pages ten to twenty"),
    ("$5-10", "five to ten dollars"), ("5-10%", "five to ten percent"), ("9am-5pm", "nine a m to five p m"),
    ("2020-2025", "twenty twenty to twenty twenty five"), ("1990-95", "nineteen ninety to ninety five"),
    # phone numbers
    ("+1 (415) 555-0100", "plus one (four one five) five five five, oh one oh oh"),
    ("415-555-0100", "four one five, five five five, oh one oh oh"),
    ("555-0100", "five five five, oh one oh oh"), ("(415) 555-0100", "(four one five) five five five, oh one oh oh"),
    # units
    ("5 km", "five kilometers"), ("1 km", "one kilometer"), ("5km", "five kilometers"), ("1.5 kg", "one point five kilograms"),
    ("10 lbs", "ten pounds"), ("1 lb", "one pound"), ("12 oz", "twelve ounces"), ("6 ft", "six feet"),
    ("100 mph", "one hundred miles per hour"), ("60 km/h", "sixty kilometers per hour"), ("20°C", "twenty degrees Celsius"),
    ("98.6°F", "ninety eight point six degrees Fahrenheit"), ("-5°C", "minus five degrees Celsius"),
    ("45°", "forty five degrees"), ("3.5GB", "three point five gigabytes"), ("1 GB", "one gigabyte"),
    ("500 ms", "five hundred milliseconds"), ("5s", "five seconds"), ("2x", "two times"), ("60 Hz", "sixty hertz"),
    ("5 in the box", "five in the box"), ("1920x1080", "one thousand nine hundred twenty by one thousand eighty"),
    ("5 ft. tall", "five feet tall"),
    # abbreviations and titles
    ("Dr. Smith lives on Elm St.", "Doctor Smith lives on Elm Street."), ("St. Louis", "Saint Louis"),
    ("Main Dr.", "Main Drive."), ("Mr. Jones", "Mister Jones"), ("Mrs. Jones", "Missus Jones"),
    ("Prof. Lee", "Professor Lee"), ("Mt. Everest", "Mount Everest"), ("Ft. Worth", "Fort Worth"),
    ("apples vs. pears", "apples versus pears"), ("fruit, etc.", "fruit, et cetera."),
    ("e.g., this", "for example, this"), ("No. 5", "number five"), ("No. I won't", "No. I won't"),
    ("John Smith Jr.", "John Smith junior."), ("Acme Inc.", "Acme incorporated."), ("10 Downing Ave.", "ten Downing avenue."), ("5 Elm St. is near", "five Elm Street is near"),
    ("the st. of", "the street of"),
    ("OK", "okay"), ("w/ cheese", "with cheese"),
    # acronyms and initialisms
    ("CEO", "C E O"), ("the FBI", "the F B I"), ("CEOs", "C E Os"), ("NASA", "Nasa"), ("HTML", "H T M L"),
    ("the U.S. Army", "the U S Army"), ("STOP THAT NOW", "STOP THAT NOW"), ("I", "I"), ("A cat", "A cat"),
    ("an API key", "an A P I key"),
    # numbers inside words
    ("COVID-19", "Covid nineteen"), ("MP3", "M P three"), ("4K", "four K"), ("B2B", "B two B"), ("3D", "three D"),
    ("H2O", "H two O"), ("x86", "x eighty six"), ("Windows 11", "Windows eleven"),
    # web addresses
    ("www.example.com", "w w w dot example dot com"), ("john.doe@example.com", "john dot doe at example dot com"),
    ("https://lyre.dev/docs", "h t t p s colon slash slash lyre dot dev slash docs"),
    ("example.org", "example dot org"),
    # symbols
    ("R&D", "R and D"), ("A & B", "A and B"), ("1+1=2", "one plus one equals two"), ("#1", "number one"),
    ("#lyre", "hashtag lyre"), ("@lyre", "at lyre"), ("and/or", "and or"), ("%", "percent"), ("AT&T", "A T and T"),
    # emotion tags pass through untouched
    ("<laugh> that costs $5", "<laugh> that costs five dollars"), ("Hello <sigh> 3 times", "Hello <sigh> three times"),
    ("Wow<chuckle>", "Wow<chuckle>"),
    # plain text untouched
    ("Hello, world!", "Hello, world!"), ("don't stop", "don't stop"), ("well-known", "well-known"),
]
