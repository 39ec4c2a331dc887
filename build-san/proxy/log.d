build-san/proxy/log.o: proxy/log.c proxy/log.h proxy/config.h
proxy/log.h:
proxy/config.h:
