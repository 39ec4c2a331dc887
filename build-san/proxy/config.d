build-san/proxy/config.o: proxy/config.c proxy/config.h
proxy/config.h:
