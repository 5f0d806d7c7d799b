VALUE = "helper"
