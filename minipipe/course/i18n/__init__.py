"""The course in German and Dutch: the English notebooks are the one source, their translations are
gettext catalogs in i18n/<lang>/ (one per notebook, one entry per markdown block: blocks.py), brought up
to date by extract.py."""
