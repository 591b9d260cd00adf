"""example.tools.shout: upper-case a string and add an exclamation mark."""


def shout(value):
    return str(value).upper() + "!"


class FilterModule:
    def filters(self):
        return {"shout": shout}
