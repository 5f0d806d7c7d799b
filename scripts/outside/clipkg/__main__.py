import sys
print("pkg main", __name__, __spec__.name, repr(__package__), sys.argv[1:])
